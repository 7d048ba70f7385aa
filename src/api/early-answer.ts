// A transport's offer to encode an answer before the call returns: set in the call's context values
// by a transport that writes big answers (REST), read by an implementation that learns its answer
// early (CreateJob of many tasks: the store knows every row it inserts before PostgreSQL has
// written them). The implementation hands over the message it will return; the transport encodes
// it meanwhile, and uses that encoding only if the call returns that very message object.
import { createContextKey } from "@connectrpc/connect";
import type { DescMessage, MessageShape } from "@bufbuild/protobuf";

export type EarlyAnswer = (message: MessageShape<DescMessage>) => void;

export const earlyAnswerKey = createContextKey<EarlyAnswer | undefined>(undefined, { description: "leasehold early answer" });
