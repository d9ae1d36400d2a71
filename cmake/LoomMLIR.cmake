#===- LoomMLIR.cmake - Find MLIR/LLVM 22 and set up TableGen --------------===#
#
# Thin helper (in the manner of CIRCT's AddCIRCT.cmake): finds Debian's MLIR,
# brings in AddLLVM/AddMLIR/TableGen, and makes the repo root and the build
# dir include roots so "dialects/Loom/IR/LoomOps.h.inc" resolves.
#
#===----------------------------------------------------------------------===#
if(NOT MLIR_DIR)
  set(MLIR_DIR /usr/lib/llvm-22/lib/cmake/mlir)
endif()
find_package(MLIR REQUIRED CONFIG PATHS ${MLIR_DIR} NO_DEFAULT_PATH)
message(STATUS "Using MLIRConfig.cmake in: ${MLIR_DIR}")
message(STATUS "Using LLVMConfig.cmake in: ${LLVM_DIR}")

list(APPEND CMAKE_MODULE_PATH "${MLIR_CMAKE_DIR}" "${LLVM_CMAKE_DIR}")
set(LLVM_RUNTIME_OUTPUT_INTDIR ${CMAKE_BINARY_DIR}/bin)
set(LLVM_LIBRARY_OUTPUT_INTDIR ${CMAKE_BINARY_DIR}/lib)
set(MLIR_BINARY_DIR ${CMAKE_BINARY_DIR})
include(TableGen)
include(AddLLVM)
include(AddMLIR)
set(MLIR_LINK_MLIR_DYLIB ON)
include(HandleLLVMOptions)

include_directories(SYSTEM ${LLVM_INCLUDE_DIRS} ${MLIR_INCLUDE_DIRS})
include_directories(${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR})
link_directories(${LLVM_BUILD_LIBRARY_DIR})
separate_arguments(LOOM_LLVM_DEFINITIONS NATIVE_COMMAND ${LLVM_DEFINITIONS})
add_definitions(${LOOM_LLVM_DEFINITIONS})
if(NOT MLIR_VERSION_MAJOR EQUAL 22 AND NOT LLVM_VERSION_MAJOR EQUAL 22)
  message(FATAL_ERROR "Loom needs MLIR/LLVM 22, found ${LLVM_PACKAGE_VERSION} "
                      "at ${MLIR_DIR}; run scripts/setup")
endif()
