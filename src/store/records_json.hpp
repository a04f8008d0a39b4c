#pragma once
// JSON form of a step's rows (groups with their rollouts and turns, and events), so that a
// data-parallel rank can send its rows to rank 0, which alone writes the store (src/dist,
// docs/distributed.md). Lossless for every field of GroupRecord and EventRecord (doubles
// round-trip exactly; NaN and infinities travel as null / strings).
#include <string>
#include <vector>

#include "store/records.hpp"

namespace leap::store {

/// A step's groups and events as one JSON text.
std::string step_rows_to_json(const std::vector<GroupRecord>& groups, const std::vector<EventRecord>& events);

/// Inverse of step_rows_to_json: appends the groups and events to `groups` / `events`. Throws
/// leap::StoreError when the text is not what step_rows_to_json writes.
void step_rows_from_json(const std::string& json, std::vector<GroupRecord>& groups, std::vector<EventRecord>& events);

}  // namespace leap::store
