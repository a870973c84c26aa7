package testenv

// GrpcurlVersion is the grpcurl release that [Grpcurl] returns. The Makefile pins the same one.
const GrpcurlVersion = "v1.9.4"

// EnvGrpcurl names the environment variable that points [Grpcurl] at a grpcurl binary built from
// GrpcurlVersion instead of the cached build.
const EnvGrpcurl = "SLUICE_TEST_GRPCURL"
