# Adds every immediate subdirectory that has a CMakeLists.txt, so components
# can land in their own folders without editing a shared list.
macro(kubetrain_add_child_directories)
  file(GLOB _kubetrain_children LIST_DIRECTORIES true CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*)
  list(SORT _kubetrain_children)
  foreach(_child ${_kubetrain_children})
    if(IS_DIRECTORY ${_child} AND EXISTS ${_child}/CMakeLists.txt)
      add_subdirectory(${_child})
    endif()
  endforeach()
endmacro()
