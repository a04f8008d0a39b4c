// Helper of tests/test_dist.cpp (not a test itself): runs the real update path (one sft_step, then
// 3 x compute_old_logprobs + ppo_update) on a fixed synthetic batch of 7 samples and saves the
// trained parameters. Without WORLD_SIZE it trains on the whole batch in one process; with
// RANK / WORLD_SIZE=2 / MASTER_ADDR / MASTER_PORT set, rank 0 takes samples [0, SPLIT) and rank 1
// [SPLIT, 7), joined by the Gloo process group. MODE "die" / "hang" makes rank 1 exit / sleep
// after joining, for the fault test.
//
// usage: leap_dist_update_worker MODEL_DIR OUT_FILE AGGREGATION SPLIT MODE TIMEOUT_S
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <random>

#include "dist/process_group.hpp"
#include "model/transformer.hpp"
#include "rl/update.hpp"
#include "util/error.hpp"

using namespace leap;

int main(int argc, char** argv) {
  if (argc != 7) {
    std::cerr << "usage: leap_dist_update_worker MODEL_DIR OUT_FILE AGGREGATION SPLIT MODE TIMEOUT_S\n";
    return 2;
  }
  try {
    const std::string model_dir = argv[1], out = argv[2], mode = argv[5];
    const size_t split = static_cast<size_t>(std::stoul(argv[4]));
    at::set_num_threads(1);
    const auto rdv = dist::rendezvous_from_env();
    std::unique_ptr<dist::ProcessGroup> pg;
    if (rdv.world_size > 1) pg = dist::ProcessGroup::create(rdv, "gloo", std::stod(argv[6]));
    if (pg && pg->rank() == 1 && mode == "die") _exit(7);
    if (pg && pg->rank() == 1 && mode == "hang") sleep(600);

    // The global batch: 7 samples, segments {0,1} {2,3} {4,5} {6} (SPLIT 3 puts segment {2,3} on
    // both ranks: segment_mean's totals are the step's over all ranks).
    std::mt19937_64 rng(5);
    std::vector<rl::TrainSample> all;
    for (int i = 0; i < 7; ++i) {
      rl::TrainSample s;
      for (int j = 0; j < 3 + i % 4; ++j) s.prompt_ids.push_back(static_cast<int64_t>(rng() % 1000) + 3);
      for (int j = 0; j < 1 + (i * 3) % 6; ++j) s.completion_ids.push_back(static_cast<int64_t>(rng() % 1000) + 3);
      s.advantage = (static_cast<double>(rng() % 2001) - 1000.0) / 1000.0;
      s.segment_id = i / 2;
      all.push_back(std::move(s));
    }
    std::vector<rl::TrainSample> mine;
    for (size_t i = 0; i < all.size(); ++i)
      if (!pg || (pg->rank() == 0) == (i < split)) mine.push_back(all[i]);

    auto model = model::load_transformer(model_dir, torch::kFloat32, torch::kCPU);
    std::vector<at::Tensor> params;
    for (auto& p : model->parameters())
      if (p.requires_grad()) params.push_back(p);
    torch::optim::AdamW opt(params, torch::optim::AdamWOptions(1e-3).weight_decay(0.01));
    rl::UpdateOptions o;
    o.aggregation = rl::parse_aggregation(argv[3]);
    o.mini_batch_size = 2;
    o.grad_accum = 8;  // one optimizer step per update (the whole batch), in both layouts
    o.max_grad_norm = 0.5;
    o.max_len = 8;
    o.group = pg.get();
    const double sft = rl::sft_step(model, opt, params, mine, o);
    std::cout << "sft loss " << sft << "\n";
    for (int step = 0; step < 3; ++step) {
      rl::compute_old_logprobs(model, nullptr, mine, o);
      if (o.aggregation == rl::Aggregation::segment_mean) rl::set_step_segment_weights(mine, pg.get());
      const auto st = rl::ppo_update(model, opt, params, mine, o);
      std::cout << "update " << step + 1 << ": loss " << st.loss << " grad_norm " << st.grad_norm << " steps "
                << st.optimizer_steps << "\n";
    }
    std::vector<at::Tensor> saved;
    for (const auto& p : params) saved.push_back(p.detach().clone());
    torch::save(saved, out);
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
}
