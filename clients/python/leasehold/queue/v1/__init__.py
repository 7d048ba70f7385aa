"""Generated protobuf and gRPC modules of the leasehold.queue API (see generate.sh)."""
