#include "ccc/dtype.h"

namespace ccc {

namespace {

struct DTypeInfo {
  const char* name;
  int size;
  bool is_float;
  const char* device_type;
};

DTypeInfo info(DType t) {
  switch (t) {
    case DType::F64: return {"f64", 8, true, "double"};
    case DType::F32: return {"f32", 4, true, "float"};
    case DType::F16: return {"f16", 2, true, "ccc::f16"};
    case DType::BF16: return {"bf16", 2, true, "ccc::bf16"};
    case DType::I64: return {"i64", 8, false, "long long"};
    case DType::U64: return {"u64", 8, false, "unsigned long long"};
    case DType::I32: return {"i32", 4, false, "int"};
    case DType::U32: return {"u32", 4, false, "unsigned"};
    case DType::I8: return {"i8", 1, false, "signed char"};
    case DType::U8: return {"u8", 1, false, "unsigned char"};
  }
  return {"?", 1, false, "?"};
}

}  // namespace

const char* dtype_name(DType t) { return info(t).name; }
int dtype_size(DType t) { return info(t).size; }
bool dtype_is_float(DType t) { return info(t).is_float; }
const char* dtype_device_type(DType t) { return info(t).device_type; }

std::optional<DType> parse_dtype(std::string_view name) {
  for (DType t : kAllDTypes)
    if (name == dtype_name(t)) return t;
  return std::nullopt;
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Prod: return "prod";
    case ReduceOp::Min: return "min";
    case ReduceOp::Max: return "max";
    case ReduceOp::Avg: return "avg";
  }
  return "?";
}

std::optional<ReduceOp> parse_reduce_op(std::string_view name) {
  for (ReduceOp op : kAllReduceOps)
    if (name == reduce_op_name(op)) return op;
  return std::nullopt;
}

}  // namespace ccc
