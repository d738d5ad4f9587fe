// Package redact masks the passwords in Redis addresses and MySQL DSNs, so
// that redfence's commands can print a setting, or an error that quotes one,
// without printing the password in it.
package redact
