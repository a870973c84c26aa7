package testenv

// VersitygwVersion is the versitygw release that [S3] runs. The Makefile pins the same one.
const VersitygwVersion = "v1.8.0"

// EnvVersitygw names the environment variable that points [S3] at a versitygw binary built from
// VersitygwVersion instead of the cached build.
const EnvVersitygw = "SLUICE_TEST_VERSITYGW"
