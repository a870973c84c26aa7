package api

import (
	"fmt"
	"strings"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/reflect/protoreflect"

	sluicev1 "github.com/sluicemq/sluice/gen/sluice/v1"
	"github.com/sluicemq/sluice/gen/sluice/v1/sluicev1connect"
)

// brokerServices are the services brokers serve to clients. The control
// plane mounts both so that a client that dials it with one of their
// calls learns where to go instead of getting a bare 404: it serves only
// what its rules name (RecordService.GetMetadata, which lists the
// brokers), and answers every other procedure of them with
// servedByBrokers.
var brokerServices = map[string]protoreflect.ServiceDescriptor{
	sluicev1connect.RecordServiceName: sluicev1.File_sluice_v1_record_proto.Services().ByName("RecordService"),
	sluicev1connect.GroupServiceName:  sluicev1.File_sluice_v1_group_proto.Services().ByName("GroupService"),
}

// servedByBrokers returns the answer to a call of a broker service's
// procedure that the control plane does not serve: Unimplemented (the
// control plane never serves it, whatever its state, so a client must not
// retry here), with a message saying that brokers serve it and how to find
// them. It returns nil for any other procedure. The answer depends on the
// procedure's name only (the public schema), so it is given before
// authentication and tells an anonymous caller nothing about any tenant.
func servedByBrokers(procedure string) *connect.Error {
	service, method, ok := strings.Cut(strings.TrimPrefix(procedure, "/"), "/")
	sd := brokerServices[service]
	if !ok || sd == nil || sd.Methods().ByName(protoreflect.Name(method)) == nil {
		return nil
	}
	short := service[strings.LastIndex(service, ".")+1:]
	what := "the broker addresses"
	if service == sluicev1connect.RecordServiceName {
		what = "the broker addresses of a topic's partitions and their leaders"
	}
	return connect.NewError(connect.CodeUnimplemented, fmt.Errorf(
		"%s.%s is served by brokers, not the control plane: call RecordService.GetMetadata here for %s, then call %s on any broker",
		short, method, what, method))
}

// brokerGroups is GroupService on the control plane: no procedure of it
// is served here (the auth interceptor answers each with servedByBrokers
// before this runs).
type brokerGroups struct {
	sluicev1connect.UnimplementedGroupServiceHandler
}
