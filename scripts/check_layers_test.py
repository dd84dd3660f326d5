#!/usr/bin/python3
"""Tests of check-layers.py on small trees in temporary folders, with the
rules of the real docs/architecture.md."""

import importlib.util
import io
import os
import shutil
import tempfile
import unittest
from contextlib import redirect_stderr, redirect_stdout

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
_spec = importlib.util.spec_from_file_location("check_layers",
                                               os.path.join(HERE, "check-layers.py"))
check_layers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_layers)


class CheckLayersTest(unittest.TestCase):

    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="check_layers_test.")
        self.addCleanup(shutil.rmtree, self.root)
        os.makedirs(os.path.join(self.root, "docs"))
        shutil.copy(os.path.join(REPO, "docs", "architecture.md"),
                    os.path.join(self.root, "docs", "architecture.md"))

    def write(self, path, text):
        full = os.path.join(self.root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as f:
            f.write(text)

    def run_checker(self, *args):
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = check_layers.main(["--root", self.root, *args])
        return code, out.getvalue(), err.getvalue()

    def write_allowed_tree(self):
        self.write("common/status_macros.h", "#pragma once\n")
        self.write("api/roles.h", "#pragma once\n")
        self.write("operator/core/reconciler.h",
                   '#pragma once\n#include "api/roles.h"\n#include "common/status_macros.h"\n')
        self.write("trainer-runtime/dist/cluster_spec.cc",
                   '#include "api/roles.h"\n#include "common/status_macros.h"\n'
                   '#include "kubetrain/v1/runtime.pb.h"\n#include "absl/status/status.h"\n'
                   "#include <vector>\n")

    def test_a_tree_that_keeps_the_layers_passes(self):
        self.write_allowed_tree()
        code, out, err = self.run_checker()
        self.assertEqual(code, 0, out + err)
        self.assertEqual(out, "")

    def test_runtime_including_the_operator_fails_naming_file_and_line(self):
        self.write_allowed_tree()
        self.write("trainer-runtime/cmd/train_command.cc",
                   '#include "common/status_macros.h"\n'
                   '#include "operator/observability/operator_metrics.h"\n')
        code, out, _ = self.run_checker()
        self.assertEqual(code, 1)
        self.assertIn('trainer-runtime/cmd/train_command.cc:2: includes '
                      '"operator/observability/operator_metrics.h"', out)
        self.assertEqual(len(out.splitlines()), 1, out)

    def assert_planted_include_fails(self, path, text, where):
        """Plants `path` with `text` in an allowed tree: the checker fails
        and names `where` (file:line)."""
        self.write_allowed_tree()
        self.write(path, text)
        code, out, _ = self.run_checker()
        self.assertEqual(code, 1)
        self.assertIn(where + ":", out)

    def test_runtime_may_use_roles_but_no_other_part_of_api(self):
        self.assert_planted_include_fails("trainer-runtime/engine/trainer.cc",
                                          '#include "api/validation.h"\n',
                                          "trainer-runtime/engine/trainer.cc:1")

    def test_core_including_a_backend_fails(self):
        self.assert_planted_include_fails("operator/core/reconciler.cc",
                                          '#include "operator/kube/informer.h"\n',
                                          "operator/core/reconciler.cc:1")

    def test_operator_including_the_runtime_fails(self):
        self.assert_planted_include_fails(
            "operator/local/controller.h",
            '#pragma once\n#include "trainer-runtime/hypertune/hypertune.h"\n',
            "operator/local/controller.h:2")

    def test_common_may_include_nothing_above_it(self):
        self.assert_planted_include_fails("common/observability/http_server.cc",
                                          '#include "api/roles.h"\n',
                                          "common/observability/http_server.cc:1")

    def test_tests_may_include_any_layer(self):
        self.write_allowed_tree()
        self.write("tests/local/fake_trainer.cc",
                   '#include "operator/core/reconciler.h"\n'
                   '#include "trainer-runtime/dist/cluster_spec.h"\n')
        code, out, err = self.run_checker()
        self.assertEqual(code, 0, out + err)

    def test_rules_without_a_layers_block_are_an_error(self):
        self.write("docs/architecture.md", "# Layers\n\nno block here\n")
        code, _, err = self.run_checker()
        self.assertEqual(code, 2)
        self.assertIn("has no ```layers block", err)

    def test_a_rule_naming_an_unknown_component_is_an_error(self):
        self.write("docs/architecture.md", "```layers\ncommon/\napi/  commn/\n```\n")
        code, _, err = self.run_checker()
        self.assertEqual(code, 2)
        self.assertIn("api/ may include commn/", err)


if __name__ == "__main__":
    unittest.main()
