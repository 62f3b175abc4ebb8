// Must not compile as part of //cornstarch/plan: the planning layer may not see the model layer's headers
// (tools/check_layers.sh builds this and expects Bazel to refuse the undeclared include).
#include "cornstarch/model/layer.h"
