// A checkpoint's manifest and shard sidecars (train/checkpoint_manifest.h) on arbitrary text, and every tensor name
// of a sidecar that parses as a piece or tp slice name. Seeds: the manifest and sidecars of checkpoints written by
// the project.
#include "cornstarch/train/checkpoint_manifest.h"
#include "fuzz/refuse_cleanly.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text = cornstarch::fuzz::Text(data, size);
  cornstarch::fuzz::RefuseCleanly([&] { cornstarch::ParseCheckpointManifest(text, "manifest.json"); });
  return cornstarch::fuzz::RefuseCleanly([&] {
    for (const std::string& name : cornstarch::ParseShardSidecar(text, "stage-0.json").tensors) {
      cornstarch::ParsePieceName(name);
      cornstarch::ParseTpSliceName(name);
    }
  });
}
