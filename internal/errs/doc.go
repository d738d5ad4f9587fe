// Package errs combines errors for the redfence packages so that the
// combination prints on one line while errors.Is and errors.As still find
// every part.
package errs
