// SPDX-License-Identifier: MIT
#pragma once
// The one table of compression methods. Built-in methods are listed in core/src/methods/registry.cpp
// (one line each); a program or a test may add its own with a static MethodRegistrar.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "moewb/methods/kv_method.h"
#include "moewb/methods/weight_method.h"

namespace moewb::methods {

class MethodRegistry {
 public:
  static MethodRegistry& instance();
  // Throws moewb::Error when the name is taken or is not lower-case letters, digits and '-'.
  void add(std::unique_ptr<WeightMethod> method);
  const WeightMethod* find(std::string_view name) const;
  // Throws moewb::Error "{context}: unknown method 'x' (known: rtn, hqq, milo)".
  const WeightMethod& get(std::string_view name, std::string_view context) const;
  std::vector<const WeightMethod*> all() const;  // built-ins first, then in order of registration
  std::string namesText() const;                 // "rtn, hqq, milo"

  // KV-cache methods, the second kind (moewb/methods/kv_method.h): a name space of their own.
  void addKv(std::unique_ptr<KvMethod> method);
  const KvMethod* findKv(std::string_view name) const;
  // Throws moewb::Error "{context}: unknown KV format 'x' (known: fp16, int8, ...)".
  const KvMethod& getKv(std::string_view name, std::string_view context) const;
  std::vector<const KvMethod*> allKv() const;
  std::string kvNamesText() const;  // "fp16, int8, int4, int2, kivi-2, kivi-4"

 private:
  MethodRegistry();
  std::vector<std::unique_ptr<WeightMethod>> methods_;
  std::vector<std::unique_ptr<KvMethod>> kv_methods_;
};

// Registers a method when a program starts: `static const MethodRegistrar reg(std::make_unique<Sign>());`
struct MethodRegistrar {
  explicit MethodRegistrar(std::unique_ptr<WeightMethod> method);
};

// Registers a KV-cache method when a program starts.
struct KvMethodRegistrar {
  explicit KvMethodRegistrar(std::unique_ptr<KvMethod> method);
};

// Shorthand for MethodRegistry::instance().get(name, context).
const WeightMethod& weightMethod(std::string_view name, std::string_view context = "method");

}  // namespace moewb::methods
