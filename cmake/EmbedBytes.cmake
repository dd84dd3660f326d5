# Writes a C++ source holding a file's bytes, so a binary carries data the
# build produced (no file to find at run time):
#   cmake -DINPUT=in.bin -DOUTPUT=out.cc -DNAMESPACE=kubetrain::api -DSYMBOL=kName
#         -P cmake/EmbedBytes.cmake
# defines `extern const unsigned char SYMBOL[]` and `extern const size_t SYMBOL##Size`.
file(READ "${INPUT}" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){24})" "\\1\n" bytes "${bytes}")
get_filename_component(name "${INPUT}" NAME)
file(WRITE "${OUTPUT}.tmp"
  "// Generated from ${name} by cmake/EmbedBytes.cmake. Do not edit.\n"
  "#include <cstddef>\n\n"
  "namespace ${NAMESPACE} {\n"
  "extern const unsigned char ${SYMBOL}[] = {\n${bytes}\n};\n"
  "extern const size_t ${SYMBOL}Size = sizeof(${SYMBOL});\n"
  "}  // namespace ${NAMESPACE}\n")
# Only a changed file is rewritten, so what depends on it rebuilds only then.
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
