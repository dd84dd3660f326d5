#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "api/codec_internal.h"
#include "api/template_placeholder.h"

// The checks that run before yaml-cpp sees a text: limits that keep hostile
// input from exhausting the stack or memory, input yaml-cpp would loop on,
// bytes that are not UTF-8, and one document, not several.

namespace kubetrain::api::internal {
namespace {

// Returns the byte offset of the first invalid UTF-8 sequence, or npos.
size_t FindInvalidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    size_t length = 0;
    uint32_t code_point = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      length = 2;
      code_point = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      length = 3;
      code_point = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      length = 4;
      code_point = c & 0x07;
    } else {
      return i;
    }
    if (i + length > text.size()) return i;
    for (size_t k = 1; k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xC0) != 0x80) return i;
      code_point = (code_point << 6) | (next & 0x3F);
    }
    const bool overlong = (length == 2 && code_point < 0x80) ||
                          (length == 3 && code_point < 0x800) ||
                          (length == 4 && code_point < 0x10000);
    if (overlong || code_point > 0x10FFFF || (code_point >= 0xD800 && code_point <= 0xDFFF)) {
      return i;
    }
    i += length;
  }
  return std::string_view::npos;
}

FieldError PositionedError(std::string_view text, size_t offset, std::string reason) {
  FieldError error{"", std::move(reason), 1, 1};
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++error.line;
      error.column = 1;
    } else {
      ++error.column;
    }
  }
  return error;
}

// Limits that keep hostile input from exhausting the stack or memory: a job
// spec is a few kilobytes and a handful of levels deep.
constexpr size_t kMaxInputBytes = 4 << 20;
constexpr int kMaxNesting = 64;

// An upper bound on the nesting of flow collections ("[[[...") and block
// sequences started on one line ("- - - ..."), checked before yaml-cpp's
// recursive parser sees the text. Indentation nesting is bounded by line
// length and needs no check here.
int ApproximateNesting(std::string_view text) {
  int flow = 0, deepest = 0, dashes = 0;
  char quote = 0;
  bool line_start = true;
  for (char c : text) {
    if (quote != 0) {
      if (c == quote) quote = 0;
      if (c == '\n') line_start = true;
      continue;
    }
    if (c == '\n') {
      line_start = true;
      dashes = 0;
      continue;
    }
    if (line_start && c == '-') {
      ++dashes;
    } else if (line_start && c != ' ') {
      line_start = false;
    }
    if (c == '"' || c == '\'') quote = c;
    if (c == '[' || c == '{') ++flow;
    if ((c == ']' || c == '}') && flow > 0) --flow;
    deepest = std::max({deepest, flow, dashes});
  }
  return deepest;
}

// yaml-cpp 0.7 loops forever, allocating, when a ',' starts a token outside
// any flow collection at document level ("[a] ,", "- a\n,", "&x ,"). A plain
// scalar never starts with ',', so a ',' that starts a token in block context
// is an error anyway: find it before yaml-cpp does. Returns the byte offset of
// such a ',', or npos.
size_t FindStrayFlowEntry(std::string_view text) {
  int flow = 0;
  char quote = 0;
  size_t line_start = 0;
  int block_scalar_parent = -1;  // indentation of a `key: |` line, while its body lasts
  while (line_start < text.size()) {
    size_t line_end = text.find('\n', line_start);
    if (line_end == std::string_view::npos) line_end = text.size();
    const std::string_view line = text.substr(line_start, line_end - line_start);
    const size_t first = line.find_first_not_of(' ');
    const int indent = first == std::string_view::npos ? -1 : static_cast<int>(first);
    if (block_scalar_parent >= 0 && quote == 0) {
      if (indent < 0 || indent > block_scalar_parent) {
        line_start = line_end + 1;
        continue;
      }
      block_scalar_parent = -1;
    }
    std::string_view previous_word;  // the token before the current position
    char previous = 0;               // last non-space character on this line
    for (size_t i = 0; i < line.size(); ++i) {
      const char c = line[i];
      if (quote != 0) {
        if (quote == '"' && c == '\\') {
          ++i;  // an escaped character, possibly a quote
        } else if (c == quote) {
          quote = 0;
          previous = c;
        }
        continue;
      }
      if (c == ' ' || c == '\t') continue;
      if (c == '#' && (i == 0 || line[i - 1] == ' ' || line[i - 1] == '\t')) break;
      if (c == '"' || c == '\'') {
        if (flow > 0 || previous == 0 || previous == ':' || previous == '-' || previous == '?' ||
            previous == ',' || previous == '[' || previous == '{') {
          quote = c;
          continue;
        }
      }
      if (c == '[' || c == '{') ++flow;
      if ((c == ']' || c == '}') && flow > 0) --flow;
      if (c == ',' && flow == 0) {
        const bool token_start = i == 0 || line[i - 1] == ' ' || line[i - 1] == '\t';
        const bool after_terminator =
            previous == 0 || previous == ']' || previous == '}' || previous == '"' ||
            previous == '\'' || previous_word == ":" || previous_word == "-" ||
            previous_word == "?" || previous_word == "---" || previous_word == "..." ||
            (!previous_word.empty() &&
             (previous_word[0] == '&' || previous_word[0] == '!' || previous_word[0] == '*'));
        if (token_start && after_terminator) return line_start + i;
      }
      // Track the whitespace-delimited word that ends here.
      size_t word_end = i;
      while (word_end + 1 < line.size() && line[word_end + 1] != ' ' &&
             line[word_end + 1] != '\t' && flow == 0 && line[word_end + 1] != ',') {
        ++word_end;
      }
      if (flow == 0 && (word_end == i || line[i - (i > 0 ? 1 : 0)] == ' ' || i == 0)) {
        previous_word = line.substr(i, word_end - i + 1);
        previous = line[word_end];
        // A block scalar header ends its line: `key: |`, `- >-`.
        if ((previous_word[0] == '|' || previous_word[0] == '>') &&
            line.find_first_not_of(' ', word_end + 1) == std::string_view::npos) {
          block_scalar_parent = indent;
        }
        i = word_end;
        continue;
      }
      previous = c;
    }
    line_start = line_end + 1;
  }
  return std::string_view::npos;
}

// Counts the documents in a YAML stream through yaml-cpp's event parser, with
// limits. yaml-cpp 0.7's LoadAll loops for ever on some malformed streams (a
// stray '}' followed by an anchor yields endless empty documents), so the
// stream is walked here first, bounded, and only the first document is ever
// loaded as a tree.
class DocumentCounter : public YAML::EventHandler {
 public:
  // Every event but the closing ones consumes input, so a well-formed stream
  // has far fewer events than this; more means the parser is not advancing.
  explicit DocumentCounter(size_t input_bytes) : event_budget_(4 * input_bytes + 1024) {}

  struct NoProgress {
    YAML::Mark mark;
  };

  int documents() const { return documents_; }
  // Where the second document's content starts (for the "one document" error).
  const YAML::Mark& second_document() const { return second_document_; }

  void OnDocumentStart(const YAML::Mark& mark) override {
    ++documents_;
    Step(mark);
  }
  void OnDocumentEnd() override { Step(last_); }
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { Node(mark); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { Node(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                const std::string&) override {
    Node(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    Node(mark);
  }
  void OnSequenceEnd() override { Step(last_); }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    Node(mark);
  }
  void OnMapEnd() override { Step(last_); }

 private:
  void Node(const YAML::Mark& mark) {
    if (documents_ == 2 && !second_seen_) {
      second_document_ = mark;
      second_seen_ = true;
    }
    Step(mark);
  }
  void Step(const YAML::Mark& mark) {
    last_ = mark;
    if (++events_ > event_budget_) throw NoProgress{mark};
  }

  size_t event_budget_;
  size_t events_ = 0;
  int documents_ = 0;
  bool second_seen_ = false;
  YAML::Mark second_document_ = YAML::Mark::null_mark();
  YAML::Mark last_ = YAML::Mark::null_mark();
};

}  // namespace

std::optional<YAML::Node> ParseSingleDocument(std::string_view text,
                                              std::vector<FieldError>* errors) {
  if (text.size() > kMaxInputBytes) {
    errors->push_back({"", "input is " + std::to_string(text.size()) + " bytes; at most " +
                               std::to_string(kMaxInputBytes) + " are accepted"});
    return std::nullopt;
  }
  if (ApproximateNesting(text) > kMaxNesting) {
    errors->push_back({"", "input nests deeper than " + std::to_string(kMaxNesting) + " levels"});
    return std::nullopt;
  }
  if (size_t comma = FindStrayFlowEntry(text); comma != std::string_view::npos) {
    errors->push_back(PositionedError(
        text, comma,
        "unexpected ',' outside a [...] or {...} list (quote the value if it is text)"));
    return std::nullopt;
  }
  if (size_t bad = FindInvalidUtf8(text); bad != std::string_view::npos) {
    errors->push_back(PositionedError(
        text, bad, "input is not valid UTF-8 (byte offset " + std::to_string(bad) + ")"));
    return std::nullopt;
  }
  if (text.find('\0') != std::string_view::npos) {
    errors->push_back(PositionedError(text, text.find('\0'), "input contains a NUL byte"));
    return std::nullopt;
  }
  // More documents than this are not counted one by one.
  constexpr int kMaxDocumentsCounted = 64;
  const std::string owned(text);
  DocumentCounter counter(text.size());
  try {
    std::istringstream stream(owned);
    YAML::Parser parser(stream);
    while (counter.documents() <= kMaxDocumentsCounted && parser.HandleNextDocument(counter)) {
    }
  } catch (const YAML::Exception& e) {
    // A placeholder YAML cannot read (`replicas: %numPs%`) is the file's
    // real problem.
    std::optional<std::string> placeholder;
    if (e.mark.line >= 0) {
      std::vector<absl::string_view> lines = absl::StrSplit(owned, '\n');
      if (static_cast<size_t>(e.mark.line) < lines.size()) {
        placeholder = PlaceholderInLine(std::string(lines[e.mark.line]));
      }
    }
    errors->push_back(ErrorAtMark(
        e.mark, "",
        placeholder ? absl::StrCat(e.msg, ": ", PlaceholderReason(*placeholder)) : e.msg));
    return std::nullopt;
  } catch (const DocumentCounter::NoProgress& stuck) {
    errors->push_back(
        ErrorAtMark(stuck.mark, "", "malformed YAML: the parser stopped advancing here"));
    return std::nullopt;
  }
  if (counter.documents() > 1) {
    const std::string found = counter.documents() > kMaxDocumentsCounted
                                  ? "more than " + std::to_string(kMaxDocumentsCounted)
                                  : std::to_string(counter.documents());
    errors->push_back(
        ErrorAtMark(counter.second_document(), "",
                    "expected one YAML document, found " + found + " (split them into files)"));
    return std::nullopt;
  }
  YAML::Node document;
  if (counter.documents() == 1) {
    try {
      document = YAML::Load(owned);
    } catch (const YAML::Exception& e) {
      errors->push_back(ErrorAtMark(e.mark, "", e.msg));
      return std::nullopt;
    }
  }
  if (counter.documents() == 0 || IsNullScalar(document)) {
    errors->push_back(
        {"", "the file is empty: expected a TrainingJob or a config with trainingInput"});
    return std::nullopt;
  }
  return document;
}

}  // namespace kubetrain::api::internal
