// turbokv — command-line client of the turbokv service. See `turbokv --help`.
//
// Exit status: 0 success; 1 an RPC or local error (printed to stderr as
// "turbokv: error: <GRPC_CODE_NAME>: <message>", or as {"error": {...}} with --json);
// 2 bad command line.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "commands.h"
#include "json_writer.h"

namespace {

#ifndef TURBOKV_VERSION
#define TURBOKV_VERSION "0.0.0"
#endif

int Fail(const turbokv::cli::GlobalOptions& g, const absl::Status& st) {
  if (turbokv::cli::IsReported(st)) return 1;  // already inside the command's JSON object
  const std::string code = absl::StatusCodeToString(st.code());
  if (g.json) {
    turbokv::cli::JsonObject err;
    err.Add("code", code).Add("message", st.message());
    std::cerr << turbokv::cli::JsonObject().Add("error", err).Dump() << std::endl;
  } else {
    std::cerr << "turbokv: error: " << code << ": " << st.message() << std::endl;
  }
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  using turbokv::cli::Action;
  using turbokv::cli::GlobalOptions;
  CLI::App app{"turbokv: command-line client of the turbokv KV-cache store"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "turbokv " TURBOKV_VERSION);
  // Words that are no subcommand land here, so the error names them instead of CLI11's "A
  // subcommand is required".
  std::vector<std::string> unknown;
  app.add_option("command", unknown)->group("");
  GlobalOptions g;
  if (const char* env = std::getenv("TURBOKV_SERVER"); env != nullptr && *env) g.server = env;
  app.add_option("--server", g.server,
                 "server HOST:PORT, a list HOST:PORT,HOST:PORT,... or dns:///NAME:PORT (blocks are "
                 "placed by rendezvous hashing; env TURBOKV_SERVER)")
      ->capture_default_str();
  app.add_option("--replicas", g.replicas, "copies of each block across the servers")
      ->capture_default_str()
      ->check(CLI::Range(1, 16));
  app.add_option("--segment-blocks", g.segment_blocks,
                 "blocks of a prefix chain placed on the same servers (every client of a "
                 "cluster must use the same value; 1: each block by its own hash)")
      ->capture_default_str()
      ->check(CLI::Range(1, turbokv::client::kMaxSegmentBlocks));
  app.add_flag("--json", g.json, "print one JSON object per command");
  app.add_option("--timeout", g.timeout_seconds,
                 "deadline of each RPC in seconds, retries included")
      ->capture_default_str()
      ->check(CLI::Range(0.001, 86400.0));
  app.add_option("--progress", g.progress,
                 "progress lines on stderr for put/get: auto (when stderr is a terminal and "
                 "--json is off), always, never")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "always", "never"}));

  // TLS and token: flags, else the environment variables the Python client reads too.
  auto& sec = g.security;
  app.add_flag("--tls", sec.tls, "TLS with the system's CA roots (implied by --tls-ca)")
      ->envname("TURBOKV_TLS");
  app.add_option("--tls-ca", sec.ca_file, "PEM CA bundle to trust for the server certificate")
      ->envname("TURBOKV_TLS_CA");
  app.add_option("--tls-cert", sec.cert_file, "PEM client certificate (mutual TLS)")
      ->envname("TURBOKV_TLS_CERT");
  app.add_option("--tls-key", sec.key_file, "PEM key of --tls-cert")->envname("TURBOKV_TLS_KEY");
  app.add_option("--tls-server-name", sec.server_name,
                 "name to check the server certificate against, when not the --server host")
      ->envname("TURBOKV_TLS_SERVER_NAME");
  app.add_option("--token", sec.token,
                 "bearer token (prefer --token-file: a flag shows in the process list)")
      ->envname("TURBOKV_TOKEN");
  app.add_option("--token-file", sec.token_file, "file holding the bearer token")
      ->envname("TURBOKV_TOKEN_FILE");

  Action action;
  turbokv::cli::AddNamespaceCommands(app, &action);
  turbokv::cli::AddPutCommand(app, &action);
  turbokv::cli::AddLookupCommand(app, &action);
  turbokv::cli::AddGetCommand(app, &action);
  turbokv::cli::AddDeleteCommand(app, &action);
  turbokv::cli::AddStatsCommand(app, &action);
  turbokv::cli::AddBenchCommand(app, &action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (!unknown.empty() && app.get_subcommands().empty()) {
      std::vector<std::string> names;
      for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
      std::cerr << "turbokv: unknown command '" << unknown.front()
                << "'; commands: " << absl::StrJoin(names, ", ") << " (see turbokv --help)"
                << std::endl;
      return 2;
    }
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (!action) return 2;

  turbokv::client::ShardedClientOptions options;
  options.client.timeout = absl::Seconds(g.timeout_seconds);
  options.client.security = g.security;
  options.replicas = g.replicas;
  options.segment_blocks = g.segment_blocks;
  absl::StatusOr<std::unique_ptr<turbokv::client::ShardedClient>> client =
      turbokv::client::ShardedClient::Connect(g.server, options);
  if (!client.ok()) return Fail(g, client.status());
  absl::Status st = action(g, **client);
  if (!st.ok()) return Fail(g, st);
  return 0;
}
