"""Declares a library installed by Debian as a Bazel repository, offline.

Every path in `required` must exist; otherwise the build stops with the Debian package that provides it, so a
missing library is one `apt-get install` (or `tools/setup.sh`) away. Only header folders outside the compiler's
built-in search path are linked into the repository (`links`); the rest are used in place.
"""

def _system_library_impl(rctx):
    for path in rctx.attr.required:
        if not rctx.path(path).exists:
            fail(("\n\ncornstarch: {lib} is missing: {path} not found.\n" +
                  "Install the Debian package with `sudo apt-get install {pkg}` or run `tools/setup.sh`.\n").format(
                     lib = rctx.attr.name,
                     path = path,
                     pkg = rctx.attr.package,
                  ))
    for name, target in rctx.attr.links.items():
        rctx.symlink(target, name)
    rctx.symlink(rctx.attr.build_file, "BUILD.bazel")
    rctx.file("WORKSPACE", "workspace(name = \"{}\")\n".format(rctx.attr.name))

system_library = repository_rule(
    implementation = _system_library_impl,
    local = True,
    attrs = {
        "package": attr.string(mandatory = True, doc = "Debian package that provides the library."),
        "required": attr.string_list(mandatory = True, doc = "Absolute paths that must exist."),
        "links": attr.string_dict(doc = "Repository-relative name -> absolute path to link."),
        "build_file": attr.label(mandatory = True, allow_single_file = True),
    },
)
