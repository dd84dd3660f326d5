#!/usr/bin/python3
"""Fails when a source file includes a header from a layer it may not use.

The layers and the includes each may make are written down once, in the
```layers block of docs/architecture.md; this script reads them from there.
A row of that block is

    <component>   <what it may include>...

where a component is a path prefix in the tree (`operator/core/`) or one
header (`api/roles.h`), and `*` means anything. A file belongs to the
component with the longest prefix that matches its path; an included header
likewise. A component may always include itself and the components under
it. Only `#include "..."` lines
count: <...> headers are system and third-party ones. Generated protobuf
headers (`kubetrain/v1/*.pb.h`) belong to proto/, where their .proto files
are. Headers outside every component (absl, gtest, nlohmann...) are not
checked.

Usage: check-layers.py [--root DIR] [--rules FILE]
Exit status: 0 when every include is allowed, 1 when one is not (each is
printed as file:line: message), 2 when the rules cannot be read.
"""

import argparse
import os
import re
import sys

SOURCE_SUFFIXES = (".h", ".hpp", ".cc", ".cpp", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
# Where generated headers are included from, and the component they belong to.
GENERATED = {"kubetrain/": "proto/"}
# Folders that hold no sources of the project.
SKIPPED_DIRS = {".git", "node_modules", "third_party"}


class RulesError(Exception):
    pass


def read_rules(path):
    """The ```layers block of `path`: {component: [allowed prefixes]}."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise RulesError(f"{path}: cannot read the layer rules: {e.strerror}")
    match = re.search(r"^```layers\n(.*?)^```", text, re.S | re.M)
    if not match:
        raise RulesError(f"{path}: has no ```layers block")
    rules = {}
    for line in match.group(1).splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        component, *allowed = line.split()
        if component in rules:
            raise RulesError(f"{path}: component {component} is listed twice")
        rules[component] = allowed
    if not rules:
        raise RulesError(f"{path}: the ```layers block lists no component")
    for component, allowed in rules.items():
        for target in allowed:
            if target != "*" and not any(c.startswith(target) for c in rules):
                raise RulesError(f"{path}: {component} may include {target}, "
                                 "which is neither a component nor a folder of components")
    return rules


def component_of(path, components):
    """The longest component that `path` (relative to the root) falls under."""
    best = None
    for component in components:
        matches = path == component if not component.endswith("/") else path.startswith(component)
        if matches and (best is None or len(component) > len(best)):
            best = component
    return best


def allowed(source, target, rules):
    # A component may use itself and what lies under it (api/ its api/roles.h).
    if source == target or (source.endswith("/") and target.startswith(source)):
        return True
    for entry in rules[source]:
        if entry == "*" or target == entry:
            return True
        # A folder covers the components below it (api/ covers api/roles.h).
        if entry.endswith("/") and target.startswith(entry):
            return True
    return False


def source_files(root):
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs
                         if d not in SKIPPED_DIRS and not d.startswith("build")
                         and not d.startswith("."))
        for name in sorted(files):
            if name.endswith(SOURCE_SUFFIXES):
                yield os.path.relpath(os.path.join(directory, name), root).replace(os.sep, "/")


def included_component(header, including_file, root, components):
    for prefix, component in GENERATED.items():
        if header.startswith(prefix) and component in components:
            return component
    # A header named relative to the including file's folder.
    beside = os.path.normpath(os.path.join(os.path.dirname(including_file), header))
    if "/" not in header and os.path.exists(os.path.join(root, beside)):
        header = beside.replace(os.sep, "/")
    return component_of(header, components)


def check(root, rules):
    """Every include that breaks the rules, as (file, line, message)."""
    components = list(rules)
    violations = []
    for path in source_files(root):
        source = component_of(path, components)
        if source is None:
            continue
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, start=1):
                match = INCLUDE.match(line)
                if not match:
                    continue
                header = match.group(1)
                target = included_component(header, path, root, components)
                if target is None or allowed(source, target, rules):
                    continue
                may = " ".join(rules[source]) or "nothing but itself"
                violations.append(
                    (path, number,
                     f'includes "{header}" ({target}), but {source} may include only: {may}'))
    return violations


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), os.pardir),
                        help="the source tree (default: this script's repository)")
    parser.add_argument("--rules", help="the file with the ```layers block "
                        "(default: ROOT/docs/architecture.md)")
    args = parser.parse_args(argv)
    root = os.path.abspath(args.root)
    rules_path = args.rules or os.path.join(root, "docs", "architecture.md")
    try:
        rules = read_rules(rules_path)
    except RulesError as e:
        print(f"check-layers: {e}", file=sys.stderr)
        return 2
    violations = check(root, rules)
    for path, number, message in violations:
        print(f"{path}:{number}: {message}")
    if violations:
        print(f"check-layers: {len(violations)} include(s) against the layers of "
              f"{os.path.relpath(rules_path, root)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
