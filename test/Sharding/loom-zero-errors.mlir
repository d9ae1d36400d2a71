// RUN: split-file %s %t
// RUN: not loom-opt --loom-zero=stage=7 %t/ok.mlir 2>&1 | FileCheck %s --check-prefix=RANGE
// RUN: not loom-opt --loom-zero %t/nomesh.mlir 2>&1 | FileCheck %s --check-prefix=NOMESH
// RUN: not loom-opt --loom-zero %t/noaxis.mlir 2>&1 | FileCheck %s --check-prefix=NOAXIS
// RUN: not loom-opt --loom-zero %t/rows.mlir 2>&1 | FileCheck %s --check-prefix=ROWS
// RANGE: error: loom-zero: stage must be 0, 1, 2 or 3, got 7
// NOMESH: error: loom-zero: needs exactly one loom.mesh, found 0
// NOAXIS: error: 'loom.mesh' op has no axis 'dp' for data parallelism (axes: tp)
// ROWS: error: 'func.func' op cannot split the rows of argument #0 over dp: dimension 0 of size 3 cannot be split 2 ways

//--- ok.mlir
loom.mesh @mesh <dp = 2>
func.func @f(%t: tensor<2x4xi32> {loom.name = "tokens", loom.role = #loom.role<input>}) {
  return
}

//--- nomesh.mlir
func.func @f(%t: tensor<2x4xi32> {loom.name = "tokens", loom.role = #loom.role<input>}) {
  return
}

//--- noaxis.mlir
loom.mesh @mesh <tp = 2>
func.func @f(%t: tensor<2x4xi32> {loom.name = "tokens", loom.role = #loom.role<input>}) {
  return
}

//--- rows.mlir
loom.mesh @mesh <dp = 2>
func.func @f(%t: tensor<3x4xi32> {loom.name = "tokens", loom.role = #loom.role<input>}) {
  return
}
