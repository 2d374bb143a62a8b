/** Defaults of ClientOptions. */
export const DefaultDialTimeoutMs = 5_000;
export const DefaultRequestTimeoutMs = 10_000;
export const DefaultMaxHops = 5;
/** How long after a refused open of the client's own session its leases renew themselves before an acquire tries again (ClientOptions.sessionRetryMs). */
export const DefaultSessionRetryMs = 30_000;
