#include "server/server_flags.h"

#include <cctype>

namespace turbokv::server {

std::string FlagEnvName(std::string_view flag) {
  std::string env = "TURBOKV_";
  for (char ch : flag.substr(flag.find_first_not_of('-'))) {
    env.push_back(ch == '-' ? '_'
                            : static_cast<char>(std::toupper(static_cast<unsigned char>(ch))));
  }
  return env;
}

void AddServerFlags(CLI::App& app, ServerOptions* options) {
  for (const OptionSpec<ServerOptions>& spec : ServerOptionTable().specs()) {
    if (spec.flag.empty()) continue;
    const OptionSpec<ServerOptions>* s = &spec;  // the table is static: it outlives `app`
    CLI::Option* opt = nullptr;
    if (spec.is_switch) {
      opt = app.add_flag_callback(
          spec.flag,
          [s, options] {
            absl::Status st = s->parse(*options, "true");
            if (!st.ok()) throw CLI::ValidationError(std::string(st.message()));
          },
          OptionHelp(spec));
    } else {
      opt = app.add_option(
          spec.flag,
          [s, options](const CLI::results_t& results) {
            absl::Status st = s->parse(*options, results.back());
            if (!st.ok()) throw CLI::ValidationError(std::string(st.message()));
            return true;
          },
          OptionHelp(spec));
      opt->type_name(spec.value_name.empty() ? "TEXT" : spec.value_name)
          ->type_size(1)
          ->expected(1)
          ->default_str(spec.format(*options));
    }
    opt->envname(FlagEnvName(spec.flag));
  }
}

}  // namespace turbokv::server
