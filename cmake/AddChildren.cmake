# kubetrain_add_components(<dir>...): adds the named subfolders in the order
# given, which is their dependency order: a folder comes after every folder
# whose targets it links or tests with `if(TARGET ...)`. The order is written
# down, not taken from the folder names, so no folder needs to wait for a later
# one (docs/architecture.md draws the layers).
#
# KUBETRAIN_ONLY_DIRS (a ;-list of paths relative to the source root, e.g.
# "trainer-runtime/data;bench/tuner") restricts a development build to those
# components; empty (the default) builds everything. A component's
# dependencies must be listed too.
set(KUBETRAIN_ONLY_DIRS "" CACHE STRING "Only add these component folders (empty: all)")

macro(kubetrain_add_components)
  foreach(_child ${ARGN})
    set(_child_dir ${CMAKE_CURRENT_SOURCE_DIR}/${_child})
    if(NOT EXISTS ${_child_dir}/CMakeLists.txt)
      message(FATAL_ERROR "kubetrain_add_components: ${_child_dir} has no CMakeLists.txt")
    endif()
    file(RELATIVE_PATH _child_rel ${PROJECT_SOURCE_DIR} ${_child_dir})
    if(NOT KUBETRAIN_ONLY_DIRS OR _child_rel IN_LIST KUBETRAIN_ONLY_DIRS)
      add_subdirectory(${_child_dir})
    endif()
  endforeach()
endmacro()
