#include "model/dtype.hpp"

#include "util/error.hpp"

namespace leap::model {

namespace {
struct Entry {
  DType dt;
  std::string_view name;
  std::size_t size;
};
constexpr Entry kTable[] = {
    {DType::F64, "F64", 8}, {DType::F32, "F32", 4}, {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2}, {DType::I64, "I64", 8}, {DType::I32, "I32", 4},
    {DType::I16, "I16", 2}, {DType::I8, "I8", 1}, {DType::U8, "U8", 1},
    {DType::BOOL, "BOOL", 1},
};
}  // namespace

std::size_t dtype_size(DType dt) noexcept {
  for (const auto& e : kTable)
    if (e.dt == dt) return e.size;
  return 0;
}

std::string_view dtype_name(DType dt) noexcept {
  for (const auto& e : kTable)
    if (e.dt == dt) return e.name;
  return "?";
}

DType parse_dtype(std::string_view name, const std::string& context) {
  for (const auto& e : kTable)
    if (e.name == name) return e.dt;
  std::string supported;
  for (const auto& e : kTable) {
    if (!supported.empty()) supported += ", ";
    supported += e.name;
  }
  throw ModelError(context + ": unsupported dtype \"" + std::string(name) + "\" (supported: " +
                   supported + ")");
}

}  // namespace leap::model
