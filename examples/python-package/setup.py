# The trainer package's build, as Cloud ML's packaging guide has it. Both
# `kubetrain jobs submit training --package-path trainer` and `python3 setup.py
# sdist` use it; without it kubetrain writes one like it (version 0.0.0).
from setuptools import find_packages, setup

setup(
    name="trainer",
    version="0.1",
    packages=find_packages(include=["trainer", "trainer.*"]),
    # What the trainer needs beyond the Python runtime image; pip installs it
    # in every replica (from PIP_INDEX_URL or PyPI when the cluster reaches one).
    install_requires=[],
    description="Logistic regression with a tuned learning rate, for kubetrain's examples",
)
