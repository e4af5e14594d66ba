// SPDX-License-Identifier: MIT
#include "moewb/methods/registry.h"

#include <fmt/format.h>

#include "moewb/error.h"
#include "moewb/methods/kv_method.h"

namespace moewb::methods {

// A built-in method's factory is defined in its own folder (core/src/methods/<name>/); this declares it and
// registers what it makes, so that adding a method to the product is one line below.
#define MOEWB_BUILTIN_METHOD(factory)                 \
  do {                                                \
    extern std::unique_ptr<WeightMethod> factory();   \
    add(factory());                                   \
  } while (0)

MethodRegistry::MethodRegistry() {
  MOEWB_BUILTIN_METHOD(makeRtnMethod);
  MOEWB_BUILTIN_METHOD(makeHqqMethod);
  MOEWB_BUILTIN_METHOD(makeMiloMethod);
  MOEWB_BUILTIN_METHOD(makeQetMethod);
  MOEWB_BUILTIN_METHOD(makeGptqMethod);
  MOEWB_BUILTIN_METHOD(makeQmoeTernaryMethod);
  MOEWB_BUILTIN_METHOD(makeQmoeSub1Method);
  // KV-cache formats: fp16, int8, int4, int2, kivi-2, kivi-4 (core/src/methods/kv/kv_formats.cpp).
  extern std::vector<std::unique_ptr<KvMethod>> makeBuiltinKvMethods();
  for (auto& kv : makeBuiltinKvMethods()) addKv(std::move(kv));
  // MoQAE: a trained router chooses one of those formats per (layer, chunk) (core/src/methods/kv/moqae/).
  extern std::unique_ptr<KvMethod> makeMoqaeKvMethod();
  addKv(makeMoqaeKvMethod());
}

#undef MOEWB_BUILTIN_METHOD

MethodRegistry& MethodRegistry::instance() {
  static MethodRegistry registry;
  return registry;
}

namespace {

void checkMethodName(std::string_view name) {
  const bool well_formed =
      !name.empty() && name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") == std::string_view::npos;
  if (!well_formed)
    throw Error(fmt::format("method registry: '{}' is not a method name (lower-case letters, digits, '-')", name));
}

}  // namespace

void MethodRegistry::add(std::unique_ptr<WeightMethod> method) {
  if (!method) throw Error("method registry: no method given");
  const std::string_view name = method->name();
  checkMethodName(name);
  if (find(name)) throw Error(fmt::format("method registry: method '{}' is registered twice", name));
  methods_.push_back(std::move(method));
}

void MethodRegistry::addKv(std::unique_ptr<KvMethod> method) {
  if (!method) throw Error("method registry: no KV method given");
  const std::string_view name = method->name();
  checkMethodName(name);
  if (findKv(name)) throw Error(fmt::format("method registry: KV format '{}' is registered twice", name));
  kv_methods_.push_back(std::move(method));
}

const KvMethod* MethodRegistry::findKv(std::string_view name) const {
  for (const auto& m : kv_methods_)
    if (m->name() == name) return m.get();
  return nullptr;
}

const KvMethod& MethodRegistry::getKv(std::string_view name, std::string_view context) const {
  if (const KvMethod* m = findKv(name)) return *m;
  throw Error(fmt::format("{}: unknown KV format '{}' (known: {})", context, name, kvNamesText()));
}

std::vector<const KvMethod*> MethodRegistry::allKv() const {
  std::vector<const KvMethod*> out;
  for (const auto& m : kv_methods_) out.push_back(m.get());
  return out;
}

std::string MethodRegistry::kvNamesText() const {
  std::string out;
  for (const auto& m : kv_methods_) out += (out.empty() ? "" : ", ") + std::string(m->name());
  return out;
}

const WeightMethod* MethodRegistry::find(std::string_view name) const {
  for (const auto& m : methods_)
    if (m->name() == name) return m.get();
  return nullptr;
}

const WeightMethod& MethodRegistry::get(std::string_view name, std::string_view context) const {
  if (const WeightMethod* m = find(name)) return *m;
  throw Error(fmt::format("{}: unknown method '{}' (known: {})", context, name, namesText()));
}

std::vector<const WeightMethod*> MethodRegistry::all() const {
  std::vector<const WeightMethod*> out;
  for (const auto& m : methods_) out.push_back(m.get());
  return out;
}

std::string MethodRegistry::namesText() const {
  std::string out;
  for (const auto& m : methods_) out += (out.empty() ? "" : ", ") + std::string(m->name());
  return out;
}

MethodRegistrar::MethodRegistrar(std::unique_ptr<WeightMethod> method) {
  MethodRegistry::instance().add(std::move(method));
}

KvMethodRegistrar::KvMethodRegistrar(std::unique_ptr<KvMethod> method) {
  MethodRegistry::instance().addKv(std::move(method));
}

const WeightMethod& weightMethod(std::string_view name, std::string_view context) {
  return MethodRegistry::instance().get(name, context);
}

}  // namespace moewb::methods
