#pragma once

#define CORNSTARCH_VERSION "0.1.0"
