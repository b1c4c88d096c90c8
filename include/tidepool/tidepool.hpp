// tidepool/tidepool.hpp: the whole public C++ interface in one include.
#pragma once

#include "tidepool/driver.hpp"
#include "tidepool/errors.hpp"
#include "tidepool/graph_pool.hpp"
#include "tidepool/pool.hpp"
#include "tidepool/process.hpp"
#include "tidepool/reclaim.hpp"
#include "tidepool/sim.hpp"
