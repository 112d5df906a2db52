// The LRFU policy's options as command-line flags (--lrfu-*), shared by the in-process
// simulators (turbokv-policy-sim, turbokv-cluster-policy-sim) so each option is declared once.
#ifndef TURBOKV_BENCH_LRFU_CLI_H_
#define TURBOKV_BENCH_LRFU_CLI_H_

#include "CLI/CLI.hpp"
#include "server/storage/lrfu_policy.h"

namespace turbokv::bench {

// Adds --lrfu-half-lives, --lrfu-initial-half-life, --lrfu-ghost-ratio, --lrfu-max-unseen-age,
// --lrfu-unseen-age-step, --lrfu-shadow-blocks, --lrfu-epoch, --lrfu-score-window and
// --lrfu-switch-margin, writing into `*options` (its values are the defaults shown). Check
// options->Validate() after parsing.
inline void AddLrfuOptions(CLI::App& app, server::LrfuOptions* options) {
  app.add_option("--lrfu-half-lives", options->half_lives,
                 "lrfu: candidate half-lives, in turnovers of the capacity")
      ->delimiter(',');
  app.add_option("--lrfu-initial-half-life", options->initial_half_life,
                 "lrfu: half-life until the shadows decide");
  app.add_option("--lrfu-ghost-ratio", options->ghost_ratio,
                 "lrfu: ghost entries per block of capacity");
  app.add_option("--lrfu-max-unseen-age", options->max_unseen_age,
                 "lrfu: largest age, in turnovers, a block with no ghost enters with (0: off)");
  app.add_option("--lrfu-unseen-age-step", options->unseen_age_step,
                 "lrfu: change of the unseen age per ghost found, turnovers per block");
  app.add_option("--lrfu-shadow-blocks", options->shadow_blocks,
                 "lrfu: sampled blocks per shadow cache");
  app.add_option("--lrfu-epoch", options->epoch_turnovers,
                 "lrfu: turnovers between half-life decisions");
  app.add_option("--lrfu-score-window", options->score_window_turnovers,
                 "lrfu: shadow score window, in shadow turnovers");
  app.add_option("--lrfu-switch-margin", options->switch_margin,
                 "lrfu: z-score a shadow must beat the current half-life by");
}

}  // namespace turbokv::bench

#endif  // TURBOKV_BENCH_LRFU_CLI_H_
