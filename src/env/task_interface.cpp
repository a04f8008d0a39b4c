#include "env/task_interface.hpp"

namespace leap::env {

const TensorDecl* TaskInterface::find_tensor(const std::string& name) const {
  for (const auto& t : inputs)
    if (t.name == name) return &t;
  for (const auto& t : outputs)
    if (t.name == name) return &t;
  return nullptr;
}

const ConstantDecl* TaskInterface::find_constant(const std::string& name) const {
  for (const auto& c : constants)
    if (c.name == name) return &c;
  return nullptr;
}

}  // namespace leap::env
