"""The class-data archive of Spark's JVM (pipelines/spark/class_archive.py): given to a driver JVM only when it
was made for that Java and those jars, first among the options so that a user's own win."""

from __future__ import annotations

import os

from pipelines.spark import class_archive
from pipelines.spark.settings import QUIET_LOG4J, driver_java_options


def test_no_archive_no_option_and_a_made_one_is_mapped_quietly(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = class_archive.archive_path()
    assert path.parent == tmp_path / "inorder" and path.suffix == ".jsa"
    assert class_archive.java_options() == ""
    assert driver_java_options("-Xmx1g", quiet=False) == "-Xmx1g"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"made")
    assert class_archive.make() == path  # there: nothing is run again
    assert class_archive.java_options() == f"-XX:SharedArchiveFile={path} -Xlog:cds=off -Xlog:cds+dynamic=off"
    assert driver_java_options("-Xmx1g", quiet=True) == (
        f"{class_archive.java_options()} -Dlog4j2.configurationFile={QUIET_LOG4J.as_uri()} -Xmx1g")


def test_another_java_or_a_changed_one_is_another_archive(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\n")
    ours = class_archive.archive_path()
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))  # Spark's launcher runs $JAVA_HOME/bin/java
    theirs = class_archive.archive_path()
    assert theirs != ours
    os.utime(java, ns=(0, 0))  # the same Java updated in place: Java would refuse the archive, so it is another
    assert class_archive.archive_path() not in (ours, theirs)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "none"))
    assert class_archive.archive_path() is None and class_archive.java_options() == ""


def test_no_home_folder_means_no_archive_not_an_error(monkeypatch):
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setattr(class_archive.Path, "home", lambda: (_ for _ in ()).throw(RuntimeError("no home directory")))
    assert class_archive.java_options() == ""
