// front_door_probe: one raw call to a flowcd, for tests/e2e/test_front_door.py,
// which needs what the flowc CLI never sends: a malformed authorization
// header, or a path submit that the CLI would refuse before sending.
//
//   front_door_probe TARGET [--ca FILE] [--authorization VALUE] METHOD [PATH]
//
// TARGET is unix:/PATH, HOST:PORT (plaintext) or tls:HOST:PORT; METHOD is
// health, cache-clear, submit or inspect (the last two name PATH as
// model_path). Prints {"code": N, "message": "..."} (the gRPC status) on
// stdout; exit status 0 when the call ran, 2 for bad usage.
#include "flowc/v1/flowc.grpc.pb.h"

#include <fstream>
#include <grpcpp/grpcpp.h>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace {

int usage() {
  std::cerr << "usage: front_door_probe TARGET [--ca FILE] [--authorization VALUE] "
               "health|cache-clear|submit|inspect [PATH]\n";
  return 2;
}

std::string readAll(const std::string &path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

} // namespace

int main(int argc, char **argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty())
    return usage();
  std::string target = args[0], ca, authorization;
  size_t i = 1;
  for (; i + 1 < args.size() && args[i].starts_with("--"); i += 2) {
    if (args[i] == "--ca")
      ca = args[i + 1];
    else if (args[i] == "--authorization")
      authorization = args[i + 1];
    else
      return usage();
  }
  if (i >= args.size())
    return usage();
  std::string method = args[i];
  std::string path = i + 1 < args.size() ? args[i + 1] : "";

  std::shared_ptr<grpc::ChannelCredentials> credentials =
      grpc::InsecureChannelCredentials();
  if (target.starts_with("tls:")) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = readAll(ca);
    credentials = grpc::SslCredentials(ssl);
    target = target.substr(4);
  }
  auto channel = grpc::CreateChannel(target, credentials);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  if (!authorization.empty())
    context.AddMetadata("authorization", authorization);
  grpc::Status status;
  if (method == "health") {
    flowc::v1::HealthResponse response;
    status = flowc::v1::Admin::NewStub(channel)->Health(&context, {}, &response);
  } else if (method == "cache-clear") {
    flowc::v1::CacheGcResponse response;
    status = flowc::v1::Cache::NewStub(channel)->Clear(&context, {}, &response);
  } else if (method == "inspect") {
    flowc::v1::InspectRequest request;
    request.set_model_path(path);
    flowc::v1::InspectResponse response;
    status = flowc::v1::Compiler::NewStub(channel)->Inspect(&context, request, &response);
  } else if (method == "submit") {
    flowc::v1::SubmitRequest request;
    request.set_model_path(path);
    auto reader = flowc::v1::Compiler::NewStub(channel)->Submit(&context, request);
    flowc::v1::SubmitEvent event;
    while (reader->Read(&event)) {
    }
    status = reader->Finish();
  } else {
    return usage();
  }
  std::cout << nlohmann::json{{"code", static_cast<int>(status.error_code())},
                              {"message", status.error_message()}}
                   .dump()
            << std::endl;
  return 0;
}
