// Enum values with their names in one table keyed by the value (never by its ordinal): the table
// gives a value's name, parses a name, and lists the choices for an error message.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/error.h"

namespace octet {

template <typename E>
struct Named {
  E value;
  std::string_view name;
};

// The name of `value`, or an empty view when the table lacks it (names are never empty).
template <typename E, size_t N>
std::string_view name_or_empty(const Named<E> (&table)[N], E value) {
  for (const Named<E>& n : table) {
    if (n.value == value) return n.name;
  }
  return {};
}

// The name of `value`; a value missing from the table is a bug in octet.
template <typename E, size_t N>
std::string_view name_in(const Named<E> (&table)[N], E value) {
  const std::string_view name = name_or_empty(table, value);
  OCTET_ASSERT(!name.empty(), "no name for value ", static_cast<long long>(value));
  return name;
}

template <typename E, size_t N>
std::vector<std::string_view> names_in(const Named<E> (&table)[N]) {
  std::vector<std::string_view> names;
  names.reserve(N);
  for (const Named<E>& n : table) names.push_back(n.name);
  return names;
}

// "a, b or c": the table's names for an error message.
template <typename E, size_t N>
std::string choices_in(const Named<E> (&table)[N]) {
  std::string out;
  for (size_t i = 0; i < N; ++i) {
    if (i > 0) out += i + 1 == N ? " or " : ", ";
    out += table[i].name;
  }
  return out;
}

// The value `name` names, or nullptr.
template <typename E, size_t N>
const E* find_named(const Named<E> (&table)[N], std::string_view name) {
  for (const Named<E>& n : table) {
    if (n.name == name) return &n.value;
  }
  return nullptr;
}

// The value `name` names; otherwise an error: unknown <what> "name": expected a, b or c.
template <typename E, size_t N>
E value_in(const Named<E> (&table)[N], std::string_view name, std::string_view what) {
  if (const E* value = find_named(table, name)) return *value;
  OCTET_FAIL("unknown ", what, " \"", name, "\": expected ", choices_in(table));
}

}  // namespace octet
