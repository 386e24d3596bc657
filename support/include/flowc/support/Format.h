// Small text formats shared by messages across components.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace flowc {

/// "[1,3,224,224]": how every error message and listing prints a shape.
std::string shapeString(const std::vector<int64_t> &shape);

} // namespace flowc
