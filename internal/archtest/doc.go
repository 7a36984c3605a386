// Package archtest holds flagdown's import boundaries: the composition root (shared/app) and push
// (shared/push, which links the AWS SDK) sit at the top, and only cmd/ and the functions that push
// may depend on them. Its test reads the import graph with `go list -deps` and fails when
//
//   - a package under shared/ other than shared/app and shared/push, or
//   - a function under functions/ that is not in pushes,
//
// depends, directly or through any chain of imports, on github.com/aws/aws-sdk-go-v2/..., shared/push
// or shared/app. It also fails when a function in pushes no longer depends on shared/push (the list
// went stale), and when the template's entry point (template/golang-flagdown/main.go, linked into
// every function image) imports shared/app or shared/push.
//
// The package holds only tests: it lives under internal/, outside the production tree.
package archtest
