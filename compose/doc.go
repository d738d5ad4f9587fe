// Package compose checks the repository's docker-compose.yml with the
// Compose specification's own Go loader, so that a file which Docker Compose
// would reject, or one that no longer starts what the example and the tests
// expect (services, images, loopback ports, health checks), cannot land on a
// machine without a Docker engine.
//
// It lives in a module of its own so that users of redfence do not download
// the loader. Run it with:
//
//	cd compose && go test ./...
package compose
