// Package spec holds no code: its tests keep lockgate's machine-readable
// protocol spec honest. docs/openapi.yaml (OpenAPI 3.1: REST and the
// WebSocket upgrade) and docs/schemas/ (JSON Schema 2020-12: one schema per
// WebSocket message) are checked against a real raftlock node: the tests
// drive every documented request of both protocols, successes and each
// error a test can provoke, and validate every response with maintained
// validators — github.com/getkin/kin-openapi's openapi3filter for REST,
// github.com/santhosh-tekuri/jsonschema/v6 for the WebSocket frames — and
// every request against the spec too (the spec must accept what the server
// accepts and refuse what it refuses, where a schema can say so). The
// spec's error-code enums are compared with internal/wire.Codes both ways.
//
// The response schemas are strict (no undocumented properties), so that a
// field the server grows without a documentation change fails here. A
// client validating replies should be lenient instead.
package spec
