// safetensors reader/writer against the Python `safetensors` package, and corrupt-file errors.
#include <doctest/doctest.h>

#include <torch/torch.h>

#include <cstring>

#include "model/safetensors.hpp"
#include "model/safetensors_torch.hpp"
#include "model/safetensors_writer.hpp"
#include "model_fixtures.hpp"
#include "util/error.hpp"

using namespace leap::model;
namespace fs = std::filesystem;

namespace {

std::string to_hex(const void* p, std::size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) {
    s += d[b[i] >> 4];
    s += d[b[i] & 15];
  }
  return s;
}

void check_view(const TensorView& t, const nlohmann::json& e) {
  INFO("tensor " << t.name);
  CHECK(dtype_name(t.dtype) == e["dtype"].get<std::string>());
  CHECK(t.shape == e["shape"].get<std::vector<int64_t>>());
  CHECK(to_hex(t.data, t.nbytes) == e["hex"].get<std::string>());
}

// Writes 8-byte length + header + `data_bytes` zero bytes.
fs::path write_raw(const fs::path& dir, const std::string& name, const std::string& header, std::size_t data_bytes,
                   uint64_t declared_len = UINT64_MAX) {
  fs::path p = dir / name;
  std::ofstream out(p, std::ios::binary);
  uint64_t n = declared_len == UINT64_MAX ? header.size() : declared_len;
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
  out << header << std::string(data_bytes, '\0');
  return p;
}

}  // namespace

TEST_SUITE_BEGIN("model");

TEST_CASE("model: safetensors reads Python-written files (all dtypes, sharded)") {
  leap_test::TempDir dir;
  std::string log;
  REQUIRE_MESSAGE(leap_test::run_tool("safetensors_fixture.py", "write " + leap_test::shell_quote(dir.path.string()),
                                      "safetensors, torch", &log) == 0,
                  log);
  const auto exp = leap_test::read_json(dir.path / "expected.json");

  SafetensorsFile f = SafetensorsFile::open(dir.path / "py.safetensors");
  CHECK(f.tensors().size() == exp["single"].size());
  for (const auto& [name, e] : exp["single"].items()) check_view(f.at(name), e);
  CHECK(f.metadata().at("who") == "leap-test");
  CHECK(f.find("nope") == nullptr);
  CHECK_THROWS_WITH_AS(f.at("nope"), doctest::Contains("py.safetensors: no tensor \"nope\""), leap::ModelError);

  // Torch conversion: copied and zero-copy give the same values and dtype.
  const TensorView& bf = f.at("bf16");
  torch::Tensor a = to_torch(bf), b = to_torch(bf, /*copy=*/false);
  CHECK((a.scalar_type() == torch::kBFloat16));
  CHECK(a.sizes().vec() == std::vector<int64_t>{2, 3, 4});
  CHECK(torch::equal(a, b));
  CHECK((to_torch(f.at("bool")).scalar_type() == torch::kBool));
  CHECK(to_torch(f.at("empty")).numel() == 0);
  CHECK(to_torch(f.at("scalar")).item<float>() == 2.5f);

  SafetensorsCheckpoint c = SafetensorsCheckpoint::open(dir.path / "sharded");
  CHECK(c.files().size() == 2);
  CHECK(c.size() == exp["sharded"].size());
  for (const auto& [name, e] : exp["sharded"].items()) check_view(c.at(name), e);
  CHECK_THROWS_WITH_AS(c.at("missing.weight"), doctest::Contains("missing.weight"), leap::ModelError);
  // Single-file checkpoint through the same interface.
  SafetensorsCheckpoint single = SafetensorsCheckpoint::open(dir.path / "py.safetensors");
  CHECK(single.size() == f.tensors().size());
}

TEST_CASE("model: safetensors written by leap are read by Python") {
  leap_test::TempDir dir;
  std::vector<double> f64{1.5, -2.25, 3e100};
  std::vector<float> f32(24);
  for (int i = 0; i < 24; ++i) f32[i] = static_cast<float>(i) * 0.5f - 3.f;
  std::vector<uint16_t> bf16{0x3f80, 0xbf80, 0x7f80, 0x0001, 0x4049};
  std::vector<uint16_t> f16{0x3c00, 0xc000, 0x7bff};
  std::vector<int64_t> i64{-1, 0, INT64_MAX};
  std::vector<int32_t> i32{7, -7};
  std::vector<int16_t> i16{-3};
  std::vector<int8_t> i8{-128, 127};
  std::vector<uint8_t> u8{0, 255, 9};
  std::vector<uint8_t> bools{1, 0, 1, 1};
  auto span = [](const auto& v) { return std::as_bytes(std::span(v)); };
  std::map<std::string, TensorBytes> t{
      {"f64", {DType::F64, {3}, span(f64)}},        {"f32", {DType::F32, {2, 3, 4}, span(f32)}},
      {"bf16", {DType::BF16, {5}, span(bf16)}},     {"f16", {DType::F16, {3, 1}, span(f16)}},
      {"i64", {DType::I64, {3}, span(i64)}},        {"i32", {DType::I32, {1, 2}, span(i32)}},
      {"i16", {DType::I16, {}, span(i16)}},         {"i8", {DType::I8, {2}, span(i8)}},
      {"u8", {DType::U8, {3}, span(u8)}},           {"bool", {DType::BOOL, {2, 2}, span(bools)}},
      {"empty", {DType::F32, {0, 4}, {}}},
  };
  const std::map<std::string, std::string> meta{{"format", "pt"}, {"writer", "leap"}};
  const fs::path file = dir.path / "leap.safetensors";
  write_safetensors(file, t, meta);

  nlohmann::json exp;
  exp["metadata"] = meta;
  for (const auto& [name, tb] : t)
    exp["tensors"][name] = {{"dtype", std::string(dtype_name(tb.dtype))},
                            {"shape", tb.shape},
                            {"hex", to_hex(tb.bytes.data(), tb.bytes.size())}};
  std::ofstream(dir.path / "expected.json") << exp.dump();
  std::string log;
  int rc = leap_test::run_tool("safetensors_fixture.py",
                               "check " + leap_test::shell_quote(file.string()) + " " +
                                   leap_test::shell_quote((dir.path / "expected.json").string()),
                               "safetensors, torch", &log);
  CHECK_MESSAGE(rc == 0, "python check of the leap-written file failed:\n" << log);

  // Header is 8-byte aligned and leap reads its own file back.
  SafetensorsFile back = SafetensorsFile::open(file);
  for (const auto& [name, e] : exp["tensors"].items()) check_view(back.at(name), e);
  CHECK(back.metadata() == meta);
  for (const auto& v : back.tensors())
    if (v.nbytes) CHECK(reinterpret_cast<std::uintptr_t>(v.data) % dtype_size(v.dtype) == 0);

  // From torch tensors.
  std::map<std::string, torch::Tensor> tt{{"w", torch::randn({4, 4}).to(torch::kBFloat16)},
                                          {"b", torch::arange(5, torch::kInt64)}};
  write_safetensors(dir.path / "torch.safetensors", tensor_bytes(tt));
  SafetensorsFile tf = SafetensorsFile::open(dir.path / "torch.safetensors");
  CHECK(torch::equal(to_torch(tf.at("w")), tt["w"]));
  CHECK(torch::equal(to_torch(tf.at("b")), tt["b"]));

  // Bad input to the writer.
  std::map<std::string, TensorBytes> bad{{"x", {DType::F32, {3}, span(i32)}}};
  CHECK_THROWS_WITH_AS(write_safetensors(dir.path / "bad.safetensors", bad),
                       doctest::Contains("tensor \"x\": 8 bytes given but shape needs 12"), leap::ModelError);
}

TEST_CASE("model: corrupt safetensors files give clear errors naming the file") {
  leap_test::TempDir dir;
  std::vector<float> v(6, 1.f);
  std::map<std::string, TensorBytes> t{{"a", {DType::F32, {6}, std::as_bytes(std::span(v))}},
                                       {"b", {DType::F32, {2, 3}, std::as_bytes(std::span(v))}}};
  const fs::path good = dir.path / "good.safetensors";
  write_safetensors(good, t);

  SUBCASE("truncated data") {
    const auto size = fs::file_size(good);
    fs::path p = dir.path / "trunc.safetensors";
    fs::copy_file(good, p);
    REQUIRE(::truncate(p.c_str(), static_cast<off_t>(size - 5)) == 0);
    CHECK_THROWS_WITH_AS(SafetensorsFile::open(p), doctest::Contains("trunc.safetensors: tensor \"b\": data_offsets"),
                         leap::ModelError);
    CHECK_THROWS_WITH_AS(SafetensorsFile::open(p), doctest::Contains("truncated"), leap::ModelError);
  }
  SUBCASE("truncated inside the header") {
    fs::path p = dir.path / "trunc_header.safetensors";
    fs::copy_file(good, p);
    REQUIRE(::truncate(p.c_str(), 20) == 0);
    CHECK_THROWS_WITH_AS(SafetensorsFile::open(p),
                         doctest::Contains("trunc_header.safetensors: header length"), leap::ModelError);
  }
  SUBCASE("too short for the length") {
    fs::path p = write_raw(dir.path, "tiny.safetensors", "", 0, 0);
    REQUIRE(::truncate(p.c_str(), 3) == 0);
    CHECK_THROWS_WITH_AS(SafetensorsFile::open(p), doctest::Contains("tiny.safetensors: not a safetensors file"),
                         leap::ModelError);
  }
  SUBCASE("absurd header length") {
    fs::path p = write_raw(dir.path, "huge.safetensors", "{}", 0, 1ull << 40);
    CHECK_THROWS_WITH_AS(SafetensorsFile::open(p), doctest::Contains("huge.safetensors: header length"),
                         leap::ModelError);
  }
  SUBCASE("offsets out of range") {
    fs::path p = write_raw(dir.path, "range.safetensors",
                           R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8);
    CHECK_THROWS_WITH_AS(SafetensorsFile::open(p),
                         doctest::Contains("range.safetensors: tensor \"w\": data_offsets [0,16] run past the end"),
                         leap::ModelError);
  }
  SUBCASE("overlapping tensors") {
    fs::path p = write_raw(dir.path, "overlap.safetensors",
                           R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                           R"("y":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                           12);
    CHECK_THROWS_WITH_AS(SafetensorsFile::open(p),
                         doctest::Contains("overlap.safetensors: tensors \"x\" and \"y\" overlap"), leap::ModelError);
  }
  SUBCASE("byte count does not match the shape") {
    fs::path p = write_raw(dir.path, "count.safetensors",
                           R"({"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}})", 8);
    CHECK_THROWS_WITH_AS(SafetensorsFile::open(p), doctest::Contains("count.safetensors: tensor \"w\""),
                         leap::ModelError);
  }
  SUBCASE("bad JSON, bad dtype, bad entries") {
    fs::path p = write_raw(dir.path, "json.safetensors", "{\"w\": [", 0);
    CHECK_THROWS_WITH_AS(SafetensorsFile::open(p), doctest::Contains("json.safetensors: header is not valid JSON"),
                         leap::ModelError);
    p = write_raw(dir.path, "dtype.safetensors", R"({"w":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})", 1);
    CHECK_THROWS_WITH_AS(SafetensorsFile::open(p), doctest::Contains("tensor \"w\": unsupported dtype \"F8_E4M3\""),
                         leap::ModelError);
    p = write_raw(dir.path, "shape.safetensors", R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4);
    CHECK_THROWS_WITH_AS(SafetensorsFile::open(p), doctest::Contains("shape entry must be a non-negative"),
                         leap::ModelError);
    p = write_raw(dir.path, "meta.safetensors", R"({"__metadata__":{"k":1}})", 0);
    CHECK_THROWS_WITH_AS(SafetensorsFile::open(p), doctest::Contains("__metadata__ value for \"k\""), leap::ModelError);
    p = write_raw(dir.path, "ok_meta.safetensors", R"({"__metadata__":{"k":"v"}})", 0);
    CHECK(SafetensorsFile::open(p).metadata().at("k") == "v");
  }
  SUBCASE("missing file and bad index") {
    CHECK_THROWS_WITH_AS(SafetensorsFile::open(dir.path / "nope.safetensors"),
                         doctest::Contains("nope.safetensors: cannot open"), leap::ModelError);
    CHECK_THROWS_WITH_AS(SafetensorsCheckpoint::open(dir.path),
                         doctest::Contains("no model.safetensors.index.json or model.safetensors"), leap::ModelError);
    std::ofstream(dir.path / "model.safetensors.index.json")
        << R"({"weight_map":{"a":"good.safetensors","zz":"good.safetensors"}})";
    CHECK_THROWS_WITH_AS(SafetensorsCheckpoint::open(dir.path),
                         doctest::Contains("tensor \"zz\" is mapped to good.safetensors but that file has no such tensor"),
                         leap::ModelError);
    std::ofstream(dir.path / "model.safetensors.index.json") << R"({"weight_map":{"a":"good.safetensors"}})";
    CHECK_THROWS_WITH_AS(SafetensorsCheckpoint::open(dir.path), doctest::Contains("\"b\" is not listed"),
                         leap::ModelError);
    std::ofstream(dir.path / "model.safetensors.index.json")
        << R"({"weight_map":{"a":"good.safetensors","b":"good.safetensors"}})";
    CHECK(SafetensorsCheckpoint::open(dir.path).size() == 2);
  }
}

TEST_SUITE_END();
