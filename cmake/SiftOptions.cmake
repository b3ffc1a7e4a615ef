# Warnings and sanitizers for sift's own targets (not for dependencies).
add_library(sift_warnings INTERFACE)
target_compile_options(sift_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wshadow -Wnon-virtual-dtor -Wcast-align
    -Woverloaded-virtual -Wformat=2 -Wimplicit-fallthrough>)
if(SIFT_WERROR)
  target_compile_options(sift_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()

if(SIFT_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
elseif(SIFT_SANITIZE STREQUAL "thread")
  # Debian's libprotobuf and Abseil are not built with TSan, and some of their headers change
  # class layouts when __SANITIZE_THREAD__ is defined (e.g. protobuf's MapFieldBase): undefine it
  # so headers agree with the uninstrumented binaries. Our code is still instrumented.
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer -U__SANITIZE_THREAD__)
  add_link_options(-fsanitize=thread)
elseif(NOT SIFT_SANITIZE STREQUAL "")
  message(FATAL_ERROR "SIFT_SANITIZE must be empty, 'address' or 'thread' (got '${SIFT_SANITIZE}')")
endif()
