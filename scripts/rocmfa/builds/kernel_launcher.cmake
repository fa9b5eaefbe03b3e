# build_aotriton passes this file as -DCMAKE_PROJECT_INCLUDE (included right after AOTriton's
# own project() call; AOTriton is not patched) with -DROCMFA_KERNEL_LAUNCHER="<python> -I -S
# <repo>/scripts/rocmfa/builds/kernel_launcher.py <compile.py> <settings file>" (shell-quoted).
# Ninja then runs every custom command through that launcher: AOTriton's kernel compile jobs
# (one add_custom_command per line of Bare.compile, ROCm/aotriton 6e00ef3e v3src/CMakeLists.txt)
# are skipped when the session staged their code object; every other command runs unchanged.
if(ROCMFA_KERNEL_LAUNCHER)
  set_property(GLOBAL PROPERTY RULE_LAUNCH_CUSTOM "${ROCMFA_KERNEL_LAUNCHER}")
  message(STATUS "[rocm-fa-workflow] custom commands run through: ${ROCMFA_KERNEL_LAUNCHER}")
endif()
