// Every system library the project wraps under third_party/ compiles, links and answers.
#include <catch2/catch.hpp>

#include <cuda_runtime_api.h>
#include <google/protobuf/stubs/common.h>
#include <mpi.h>
#include <onnx/defs/schema.h>
#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include <Eigen/Dense>

TEST_CASE("system libraries link and work", "[third_party]") {
  Eigen::Matrix2f m;
  m << 1, 2, 3, 4;
  CHECK((m * m)(0, 0) == 7.0f);
  CHECK(YAML::Load("a: 3")["a"].as<int>() == 3);
  CHECK(GOOGLE_PROTOBUF_VERSION >= 3021000);
  CHECK(onnx::OpSchemaRegistry::Schema("MatMul", 13) != nullptr);
  int major = 0, minor = 0;
  CHECK(MPI_Get_version(&major, &minor) == MPI_SUCCESS);
  CHECK(major >= 3);
  spdlog::set_level(spdlog::level::warn);
}

TEST_CASE("the CUDA runtime links and reports no device here without crashing", "[third_party]") {
  // On a machine without a GPU cudaGetDeviceCount fails and leaves the count unwritten: start at 0.
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) CHECK(count == 0);
  CHECK(count >= 0);
}
