// Package compose holds the proofs of the container assets at the repository's root, which run
// offline (this machine has no Docker engine):
//
//   - TestDockerfile parses the Dockerfile, checks that its build line is the Makefile's build
//     recipe, runs that line and checks that `sluice version` prints the version it was given,
//     and checks the runtime stage (non-root user, entrypoint, health check). TestDockerBuild runs
//     `docker build` where an engine answers and skips, saying why, where none does.
//   - TestComposeLoads loads docker-compose.yml with compose-go (the library docker compose is
//     built on) and .env.example as the env file; TestComposeLoadRefusesBrokenFiles shows the
//     loader fails on a broken file.
//   - TestComposeStack starts every service of docker-compose.yml as a local process with the
//     file's own commands, environment and health checks (Postgres from internal/testenv,
//     versitygw's binary, the sluice binary the Dockerfile's build line makes), then signs up,
//     creates a topic, produces and consumes through the control plane's published port.
//   - TestComposePrometheus checks the Prometheus config with promtool and that it scrapes every
//     Sluice service's metrics listener; TestComposeGrafana checks the provisioning files point at
//     the dashboards' folder. Prometheus and Grafana themselves are not run.
package compose
