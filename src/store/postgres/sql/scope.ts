// A bound token's account condition in a statement (CallOptions.account; services/call-options.ts):
// every statement that looks up a job or a task for a caller writes it through accountScope, so
// that another account's row is not found by the same statement and the same work as a missing one.
// The marker comment is how test/store/tenancy-mutation.test.ts finds each condition: it removes
// them one at a time and checks that the tenancy tests then fail, so no condition is untested.

/** The condition, marked as an account scope. */
export const accountScope = (condition: string) => `${ACCOUNT_SCOPE_MARK}(${condition})`;

export const ACCOUNT_SCOPE_MARK = "/*account-scope*/";
