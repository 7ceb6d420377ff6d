# The differential graph fuzzer and the concurrency test: plain executables against the
# shared library's C API only (no LibTorch headers), so that they also build and run in
# sanitizer configurations. Included from tests/fuzz/CMakeLists.txt.

# Chunked vs unsplit vs eager: reads and gradients of random splittable graphs.
add_executable(koila_graph_fuzz ${CMAKE_CURRENT_LIST_DIR}/graph_fuzz.cpp)
target_link_libraries(koila_graph_fuzz PRIVATE koila)
target_compile_options(koila_graph_fuzz PRIVATE -Wall -Wextra)
# Fixed seeds, 2400 graphs in all (seed 1 alone, 800 graphs, in plain builds: see the API
# fuzzer's seeds); each run must chunk at least 80% of its graphs.
if(KOILA_SANITIZE)
  set(KOILA_GRAPH_FUZZ_SEEDS 1 2 3)
else()
  set(KOILA_GRAPH_FUZZ_SEEDS 1)
endif()
foreach(seed ${KOILA_GRAPH_FUZZ_SEEDS})
  add_test(NAME reliability.graph_fuzz.seed${seed} COMMAND koila_graph_fuzz --seed ${seed} --graphs 800)
  set_tests_properties(reliability.graph_fuzz.seed${seed} PROPERTIES TIMEOUT 900)
endforeach()

# 8 workers training their own graphs and TorchScript modules while a 9th thread changes
# the CPU budget.
add_executable(koila_concurrency_test ${CMAKE_CURRENT_LIST_DIR}/concurrency.cpp)
target_link_libraries(koila_concurrency_test PRIVATE koila)
target_compile_options(koila_concurrency_test PRIVATE -Wall -Wextra)
find_package(Threads REQUIRED)
target_link_libraries(koila_concurrency_test PRIVATE Threads::Threads)
add_dependencies(koila_concurrency_test koila_test_models)
add_test(NAME reliability.concurrency COMMAND koila_concurrency_test ${KOILA_TEST_MODELS})
set_tests_properties(reliability.concurrency PROPERTIES TIMEOUT 900)
