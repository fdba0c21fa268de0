# Runs a CLI with a clean runtime environment and checks its exit code, and its stdout against a
# golden file or its stderr against a regex.
#   -DEXE=<program> -DARGS=<arg|...> -DENV=<VAR=value|...> -DCODE=<exit code>
#   -DEXPECTED=<golden stdout file>  and/or  -DSTDERR_REGEX=<regex>
set(unset)
foreach(var NEURON_EMU_INSTANCE_TYPE NEURON_LOGICAL_NC_CONFIG NEURON_RT_VIRTUAL_CORE_SIZE
            NEURON_RT_VISIBLE_CORES NEURON_RT_NUM_CORES NEURON_EMU_HBM_GB)
  list(APPEND unset --unset=${var})
endforeach()
# An empty process registry: processes of other test runs must not show up in golden output.
list(APPEND unset NEURON_EMU_REGISTRY_DIR=${CMAKE_CURRENT_BINARY_DIR}/no-such-registry)
string(REPLACE "|" ";" ARGS "${ARGS}")
string(REPLACE "|" ";" ENV "${ENV}")
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env ${unset} ${ENV} ${EXE} ${ARGS}
  OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL CODE)
  message(FATAL_ERROR "exit code ${rc}, expected ${CODE}\nstdout:\n${out}\nstderr:\n${err}")
endif()
if(DEFINED EXPECTED)
  file(READ ${EXPECTED} want)
  if(NOT out STREQUAL want)
    message(FATAL_ERROR "stdout differs from ${EXPECTED}\n--- got:\n${out}\n--- expected:\n${want}")
  endif()
endif()
if(DEFINED STDERR_REGEX AND NOT err MATCHES "${STDERR_REGEX}")
  message(FATAL_ERROR "stderr does not match '${STDERR_REGEX}':\n${err}")
endif()
