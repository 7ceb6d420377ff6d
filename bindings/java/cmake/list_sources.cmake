# Writes the .java files of DIR, one quoted absolute path a line, to OUT (a javac @file).
# Used for the sources SWIG generates, whose names only SWIG knows.
file(GLOB _sources "${DIR}/*.java")
list(SORT _sources)
set(_text "")
foreach(_source IN LISTS _sources)
  string(APPEND _text "\"${_source}\"\n")
endforeach()
if(NOT _sources)
  message(FATAL_ERROR "no Java sources in ${DIR}: did SWIG run?")
endif()
file(WRITE "${OUT}" "${_text}")
