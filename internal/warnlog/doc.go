// Package warnlog is the default logger of the redfence packages: their
// warnings reach the program's default logger (slog.Default), their debug and
// info records nobody.
package warnlog
