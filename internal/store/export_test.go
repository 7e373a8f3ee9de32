package store

// ClaimsLockID is claimsLockID for the external tests (claims_test.go holds
// the lock from another session).
const ClaimsLockID = claimsLockID
