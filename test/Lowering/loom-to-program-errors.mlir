// RUN: split-file %s %t
// RUN: not loom-translate --loom-to-program %t/unplanned.mlir -o %t/x.loom 2>&1 | FileCheck %s --check-prefix=UNPLANNED
// RUN: loom-opt --loom-plan-buffers %t/no-model.mlir | not loom-translate --loom-to-program -o %t/y.loom 2>&1 | FileCheck %s --check-prefix=NOMODEL
// RUN: loom-opt --loom-plan-buffers %t/no-role.mlir | not loom-translate --loom-to-program -o %t/z.loom 2>&1 | FileCheck %s --check-prefix=NOROLE
// RUN: not loom-translate --loom-program-dump %t/unplanned.mlir 2>&1 | FileCheck %s --check-prefix=NOTPROGRAM

// UNPLANNED: error: no function has a buffer plan; run loom-opt --loom-plan-buffers before --loom-to-program
// NOMODEL: error: 'func.func' op has no loom.model configuration; import the model with loom-translate --import-gpt-config
// NOROLE: error: 'func.func' op argument #0 has no loom.role (param, input or target); the runtime cannot feed it
// NOTPROGRAM: error: {{.*}}not a Loom program

//--- unplanned.mlir
func.func @f(%x: tensor<4xf32> {loom.name = "x", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>}) -> tensor<4xf32> {
  %y = loom.gelu %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

//--- no-model.mlir
func.func @f(%x: tensor<4xf32> {loom.name = "x", loom.role = #loom.role<param>, loom.init = #loom.init<zeros>}) -> tensor<4xf32> {
  %y = loom.gelu %x : tensor<4xf32>
  return %y : tensor<4xf32>
}

//--- no-role.mlir
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> attributes {loom.model = {batch = 1 : i64}} {
  %y = loom.gelu %x : tensor<4xf32>
  return %y : tensor<4xf32>
}
