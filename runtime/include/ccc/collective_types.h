// What a collective call names: element type, reduction, and the errors the runtime reports.
#pragma once

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ccc {

enum class DataType { F64, F32, F16, BF16, I64, U64, I32, U32, I8, U8 };
enum class ReduceOp { Sum, Prod, Min, Max, Avg };

inline constexpr DataType kAllDataTypes[] = {DataType::F64, DataType::F32, DataType::F16,
                                             DataType::BF16, DataType::I64, DataType::U64,
                                             DataType::I32, DataType::U32, DataType::I8,
                                             DataType::U8};
inline constexpr ReduceOp kAllReduceOps[] = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min,
                                             ReduceOp::Max, ReduceOp::Avg};

const char* data_type_name(DataType t);    // "f32", ...
size_t data_type_size(DataType t);         // bytes per element
std::optional<DataType> parse_data_type(std::string_view name);
const char* reduce_op_name(ReduceOp op);   // "sum", ...
std::optional<ReduceOp> parse_reduce_op(std::string_view name);

// Why a runtime call failed; the C API maps these to cccResult_t.
enum class ErrorKind {
  InvalidArgument,  // a bad buffer, count, type, op, root or rank
  InvalidUsage,     // e.g. a communicator used after destroy
  NoDevice,         // no CUDA driver or device
  Cuda,             // a CUDA driver call failed
  Compile,          // generating or compiling a kernel failed
  Remote,           // a peer timed out or failed during a collective
  Internal,
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

}  // namespace ccc
