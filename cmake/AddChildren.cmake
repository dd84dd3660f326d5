# Adds every immediate subdirectory that has a CMakeLists.txt, so components
# can land in their own folders without editing a shared list.
#
# KUBETRAIN_ONLY_DIRS (a ;-list of paths relative to the source root, e.g.
# "trainer-runtime/data;bench/tuner") restricts a development build to those
# components; empty (the default) builds everything.
set(KUBETRAIN_ONLY_DIRS "" CACHE STRING "Only add these component folders (empty: all)")

macro(kubetrain_add_child_directories)
  file(GLOB _kubetrain_children LIST_DIRECTORIES true CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*)
  list(SORT _kubetrain_children)
  foreach(_child ${_kubetrain_children})
    if(IS_DIRECTORY ${_child} AND EXISTS ${_child}/CMakeLists.txt)
      file(RELATIVE_PATH _child_rel ${PROJECT_SOURCE_DIR} ${_child})
      if(NOT KUBETRAIN_ONLY_DIRS OR _child_rel IN_LIST KUBETRAIN_ONLY_DIRS)
        add_subdirectory(${_child})
      endif()
    endif()
  endforeach()
endmacro()
