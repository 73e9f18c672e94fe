#include "daemon/dynamodb/api.h"
