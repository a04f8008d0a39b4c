#include "env/dtype.hpp"

#include <array>
#include <utility>

namespace leap::env {

namespace {
struct Info {
  DType type;
  std::string_view name;
  size_t size;
  std::string_view c_name;
};
constexpr std::array<Info, 10> kInfo = {{
    {DType::float16, "float16", 2, "__half"},
    {DType::bfloat16, "bfloat16", 2, "__nv_bfloat16"},
    {DType::float32, "float32", 4, "float"},
    {DType::float64, "float64", 8, "double"},
    {DType::int8, "int8", 1, "int8_t"},
    {DType::uint8, "uint8", 1, "uint8_t"},
    {DType::int16, "int16", 2, "int16_t"},
    {DType::int32, "int32", 4, "int32_t"},
    {DType::int64, "int64", 8, "int64_t"},
    {DType::bool_, "bool", 1, "bool"},
}};
constexpr std::array<std::pair<std::string_view, DType>, 9> kAliases = {{
    {"half", DType::float16}, {"fp16", DType::float16}, {"bf16", DType::bfloat16},
    {"float", DType::float32}, {"fp32", DType::float32}, {"double", DType::float64},
    {"fp64", DType::float64}, {"int", DType::int32}, {"long", DType::int64},
}};
}  // namespace

size_t dtype_size(DType t) { return kInfo.at(static_cast<size_t>(t)).size; }
std::string_view to_string(DType t) { return kInfo.at(static_cast<size_t>(t)).name; }
std::string_view c_type_name(DType t) { return kInfo.at(static_cast<size_t>(t)).c_name; }

bool dtype_from_string(std::string_view text, DType& out) {
  for (const auto& i : kInfo)
    if (i.name == text) return out = i.type, true;
  for (const auto& [name, t] : kAliases)
    if (name == text) return out = t, true;
  return false;
}

std::string dtype_names() {
  std::string s;
  for (const auto& i : kInfo) s += (s.empty() ? "" : ", ") + std::string(i.name);
  return s;
}

}  // namespace leap::env
