// Package failing holds a deliberately failing test for the harness's self-test.
package failing
