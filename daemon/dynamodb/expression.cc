#include "daemon/dynamodb/expression.h"
