#!/usr/bin/env python3
"""docs_check.py against small trees made here: each check finds what it must find."""
import contextlib
import io
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import docs_check  # noqa: E402


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


class SlugTest(unittest.TestCase):
    def test_github_slugs(self):
        self.assertEqual(docs_check.slug("The job spec"), "the-job-spec")
        self.assertEqual(docs_check.slug("`sift report`"), "sift-report")
        self.assertEqual(docs_check.slug("training.epochs"), "trainingepochs")
        self.assertEqual(docs_check.slug("tables.<name>.capacity"), "tablesnamecapacity")
        self.assertEqual(docs_check.slug("Soft search over N = 10,000"),
                         "soft-search-over-n--10000")


class LinksTest(unittest.TestCase):
    def test_broken_file_and_anchor_are_named_and_code_is_ignored(self):
        with tempfile.TemporaryDirectory() as root:
            write(root, "README.md", "[ok](docs/a.md#two-words) [gone](docs/b.md)\n"
                                     "[bad](docs/a.md#nope) `[code](x.md)`\n"
                                     "```\n[fenced](y.md)\n```\n[web](https://example.com/x)\n")
            write(root, "docs/a.md", "# A\n\n## Two words\n\n[self](#a) [up](../README.md)\n")
            problems = docs_check.check_links(root)
            self.assertEqual(len(problems), 2, problems)
            self.assertIn("README.md:1: link docs/b.md", problems[0])
            self.assertIn("README.md:2: link docs/a.md#nope: no heading #nope", problems[1])

    def test_repeated_headings_get_numbered_anchors(self):
        with tempfile.TemporaryDirectory() as root:
            write(root, "a.md", "## x\n## x\n[1](#x) [2](#x-1) [3](#x-2)\n")
            problems = docs_check.check_links(root)
            self.assertEqual(len(problems), 1, problems)
            self.assertIn("#x-2", problems[0])


class CommandsTest(unittest.TestCase):
    def run_page(self, text):
        with tempfile.TemporaryDirectory() as root:
            write(root, "page.md", text)
            return docs_check.check_commands(root, "/bin/true", "page.md")

    def test_blocks_run_in_order_in_one_session(self):
        self.assertEqual(self.run_page("```sh\nx=1\n```\ntext\n```sh\ntest \"$x\" = 1\n```\n"), [])

    def test_a_failing_block_is_named(self):
        problems = self.run_page("```sh\ntrue\n```\n\n```sh\nfalse\n```\n")
        self.assertEqual(len(problems), 1)
        self.assertTrue(problems[0].startswith("page.md:5: the block exited 1"), problems)

    def test_marked_blocks_are_skipped_and_unknown_markers_refused(self):
        self.assertEqual(self.run_page("```sh needs-gpu\nfalse\n```\n```sh\ntrue\n```\n"), [])
        problems = self.run_page("```sh maybe\nfalse\n```\n")
        self.assertIn("unknown marker", problems[0])

    def test_a_page_without_runnable_blocks_fails(self):
        self.assertIn("no runnable", self.run_page("```sh needs-checkout\nmake\n```\n")[0])


class FixturesTest(unittest.TestCase):
    def test_the_blocks_see_a_copy_of_the_fixtures(self):
        with tempfile.TemporaryDirectory() as root, tempfile.TemporaryDirectory() as fixtures:
            write(fixtures, "u.data", "196\t242\t3\t881250949\n")
            write(fixtures, "ml-1m/ratings.dat", "1::1193::5::978300760\n")
            write(root, "page.md", "```sh\ngrep -q 881250949 u.data\n"
                                   "grep -q 1193 ml-1m/ratings.dat\nrm u.data\n```\n")
            self.assertEqual(docs_check.check_commands(root, "/bin/true", "page.md",
                                                       fixtures=fixtures), [])
            self.assertTrue(os.path.exists(os.path.join(fixtures, "u.data")),
                            "a block changed the fixtures themselves")
            # without --fixtures the directory is empty
            problems = docs_check.check_commands(root, "/bin/true", "page.md")
            self.assertEqual(len(problems), 1, problems)
            self.assertIn("the block exited", problems[0])

    def test_the_command_line_takes_fixtures_and_refuses_a_missing_folder(self):
        with tempfile.TemporaryDirectory() as root, tempfile.TemporaryDirectory() as fixtures:
            write(fixtures, "events.csv", "user_id,item_id,timestamp\n")
            write(root, "page.md", "```sh\ntest -s events.csv\n```\n")
            argv = ["docs_check.py", "commands", root, "/bin/true", "page.md"]
            with contextlib.redirect_stdout(io.StringIO()), \
                    contextlib.redirect_stderr(io.StringIO()):
                self.assertEqual(docs_check.main(argv + ["--fixtures", fixtures]), 0)
                self.assertEqual(docs_check.main(argv), 1)
                self.assertEqual(docs_check.main(argv + ["--fixtures"]), 2)
                self.assertEqual(docs_check.main(argv + ["--list", "--fixtures", fixtures]), 0)
            missing = os.path.join(root, "nope")
            self.assertEqual(docs_check.check_commands(root, "/bin/true", "page.md",
                                                       fixtures=missing),
                             [f"page.md: --fixtures {missing}: not a directory"])


if __name__ == "__main__":
    unittest.main()
