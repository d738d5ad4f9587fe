// Package devserver starts throwaway Redis and MariaDB servers on loopback
// ports, as local processes (redis-server, mariadbd) or as containers through
// testcontainers-go, for redfence's tests and its inventory demo.
//
// Containers are compiled in only with the containers build tag (-tags
// containers): testcontainers-go and the Docker client are most of the
// demo's build. Without it [DockerAvailable] and the container Start
// functions return [ErrNoContainers], which says how to turn them on.
//
// A process runs in a process group of its own, so that killing it also ends
// anything it started, and on Linux it is killed by the kernel when the
// program that started it dies. Nothing it writes is meant to outlive it:
// [Process.Close] kills it and removes the directory it was given when the
// package created that directory. Such a directory holds a lock file, locked
// while the program that created it runs; one whose lock is free was left by
// a program killed before it could remove it, and the next Start function
// that creates a directory of the same kind removes it.
package devserver
