// The command line of turbokv-server, made from the option table (ServerOptionTable()): one
// CLI11 option per table entry with a flag, each also read from its environment variable
// TURBOKV_<FLAG> (--max-block-bytes <-> TURBOKV_MAX_BLOCK_BYTES). main.cc parses; tests parse
// argument lists with it too.
#ifndef TURBOKV_SERVER_SERVER_FLAGS_H_
#define TURBOKV_SERVER_SERVER_FLAGS_H_

#include <string>
#include <string_view>

#include "CLI/CLI.hpp"
#include "server/server_options.h"

namespace turbokv::server {

// "--max-block-bytes" -> "TURBOKV_MAX_BLOCK_BYTES".
std::string FlagEnvName(std::string_view flag);

// Adds every flag of ServerOptionTable() to `app`. Parsing then writes each given flag into
// *options (which must outlive `app`'s parse) through the table's parser, so a value out of its
// range or in a bad unit fails the parse with a CLI::ValidationError whose message names the
// field and the flag. --help shows, per flag, `VALUE=DEFAULT (Env:NAME)` (the default is what
// *options holds when this is called, normally ServerOptions()'s) and the help text with its
// unit and range.
void AddServerFlags(CLI::App& app, ServerOptions* options);

}  // namespace turbokv::server

#endif  // TURBOKV_SERVER_SERVER_FLAGS_H_
