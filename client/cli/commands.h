// Subcommands of the `turbokv` CLI. Each Add*Command registers a CLI11 subcommand whose
// callback stores the action to run into *action; main() connects and runs it.
#ifndef TURBOKV_CLIENT_CLI_COMMANDS_H_
#define TURBOKV_CLIENT_CLI_COMMANDS_H_

#include <functional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "json_writer.h"
#include "turbokv/client/client.h"
#include "turbokv/client/sharded_client.h"

namespace turbokv::cli {

// Flags given before the subcommand.
struct GlobalOptions {
  // HOST:PORT, a comma-separated list of them, or dns:///NAME:PORT (rendezvous.h); blocks are
  // placed on the nodes by rendezvous hashing (sharded_client.h).
  std::string server = "127.0.0.1:50051";
  int replicas = 1;  // copies of each block (--replicas)
  // Blocks of a chain placed together (--segment-blocks, rendezvous.h).
  int segment_blocks = client::kDefaultSegmentBlocks;
  bool json = false;            // one JSON object per command on stdout
  double timeout_seconds = 60;  // per RPC, retries included
  // Progress lines on stderr during put/get: "auto" = when stderr is a terminal and --json is
  // off; "always"; "never".
  std::string progress = "auto";
  // TLS and bearer token (--tls, --tls-ca, --tls-cert, --tls-key, --tls-server-name, --token,
  // --token-file; env TURBOKV_TLS_CA, ... like the Python client's Security.from_env).
  turbokv::client::ClientSecurity security;
};

// Whether put/get print progress lines to stderr.
bool ShowProgress(const GlobalOptions& g);

// Marks a failure status as already reported inside the command's one JSON object (`put
// --json` on a partial failure), so main() exits 1 without printing a second object.
absl::Status MarkReported(absl::Status status);
bool IsReported(const absl::Status& status);

// Runs a command against the connected nodes (one node behaves as a plain Client).
using Action = std::function<absl::Status(const GlobalOptions&, const client::ShardedClient&)>;

void AddNamespaceCommands(CLI::App& app, Action* action);  // ns register, ns list, ns drop
void AddDeleteCommand(CLI::App& app, Action* action);
void AddPutCommand(CLI::App& app, Action* action);
void AddLookupCommand(CLI::App& app, Action* action);
void AddGetCommand(CLI::App& app, Action* action);
void AddStatsCommand(CLI::App& app, Action* action);
void AddBenchCommand(CLI::App& app, Action* action);  // bench_command.cc

// Prints `obj` as one JSON line (--json) or as "key: value" lines.
void Emit(const GlobalOptions& g, const JsonObject& obj);

}  // namespace turbokv::cli

#endif  // TURBOKV_CLIENT_CLI_COMMANDS_H_
