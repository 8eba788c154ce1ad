/*
 * resnet50_sizes.h - the number of float32 values in each of the 161
 * parameter tensors of ResNet-50, in the order the model lists them: the
 * standard torchvision ResNet-50 (torchvision.models.resnet50: Bottleneck
 * blocks [3, 4, 6, 3], expansion 4, 1000 classes), whose parameters are the
 * conv weights (no conv has a bias), each batch norm's gamma (weight) and
 * beta (bias), and the fc layer's weight and bias. Batch-norm running
 * statistics are buffers, not parameters, so they are not here.
 *
 * A conv of C_out x C_in x k x k has C_out*C_in*k*k values. Each block is
 * conv1 1x1, bn1, conv2 3x3, bn2, conv3 1x1 (4x widening), bn3, and in the
 * first block of each layer a downsample conv 1x1 and its bn. In all
 * 25,557,032 values (97.5 MiB as float32), the model's well-known count.
 */
#ifndef KVS_BENCH_RESNET50_SIZES_H
#define KVS_BENCH_RESNET50_SIZES_H

#define RESNET50_NTENSORS 161
#define RESNET50_NVALUES  25557032L

static const long resnet50_sizes[RESNET50_NTENSORS] = {
       9408L,              /* conv1.weight 64x3x7x7 */
         64L,      64L,    /* bn1.weight, .bias */
       4096L,              /* layer1.0.conv1.weight 64x64x1x1 */
         64L,      64L,    /* layer1.0.bn1.weight, .bias */
      36864L,              /* layer1.0.conv2.weight 64x64x3x3 */
         64L,      64L,    /* layer1.0.bn2.weight, .bias */
      16384L,              /* layer1.0.conv3.weight 256x64x1x1 */
        256L,     256L,    /* layer1.0.bn3.weight, .bias */
      16384L,              /* layer1.0.downsample.0.weight 256x64x1x1 */
        256L,     256L,    /* layer1.0.downsample.1.weight, .bias */
      16384L,              /* layer1.1.conv1.weight 64x256x1x1 */
         64L,      64L,    /* layer1.1.bn1.weight, .bias */
      36864L,              /* layer1.1.conv2.weight 64x64x3x3 */
         64L,      64L,    /* layer1.1.bn2.weight, .bias */
      16384L,              /* layer1.1.conv3.weight 256x64x1x1 */
        256L,     256L,    /* layer1.1.bn3.weight, .bias */
      16384L,              /* layer1.2.conv1.weight 64x256x1x1 */
         64L,      64L,    /* layer1.2.bn1.weight, .bias */
      36864L,              /* layer1.2.conv2.weight 64x64x3x3 */
         64L,      64L,    /* layer1.2.bn2.weight, .bias */
      16384L,              /* layer1.2.conv3.weight 256x64x1x1 */
        256L,     256L,    /* layer1.2.bn3.weight, .bias */
      32768L,              /* layer2.0.conv1.weight 128x256x1x1 */
        128L,     128L,    /* layer2.0.bn1.weight, .bias */
     147456L,              /* layer2.0.conv2.weight 128x128x3x3 */
        128L,     128L,    /* layer2.0.bn2.weight, .bias */
      65536L,              /* layer2.0.conv3.weight 512x128x1x1 */
        512L,     512L,    /* layer2.0.bn3.weight, .bias */
     131072L,              /* layer2.0.downsample.0.weight 512x256x1x1 */
        512L,     512L,    /* layer2.0.downsample.1.weight, .bias */
      65536L,              /* layer2.1.conv1.weight 128x512x1x1 */
        128L,     128L,    /* layer2.1.bn1.weight, .bias */
     147456L,              /* layer2.1.conv2.weight 128x128x3x3 */
        128L,     128L,    /* layer2.1.bn2.weight, .bias */
      65536L,              /* layer2.1.conv3.weight 512x128x1x1 */
        512L,     512L,    /* layer2.1.bn3.weight, .bias */
      65536L,              /* layer2.2.conv1.weight 128x512x1x1 */
        128L,     128L,    /* layer2.2.bn1.weight, .bias */
     147456L,              /* layer2.2.conv2.weight 128x128x3x3 */
        128L,     128L,    /* layer2.2.bn2.weight, .bias */
      65536L,              /* layer2.2.conv3.weight 512x128x1x1 */
        512L,     512L,    /* layer2.2.bn3.weight, .bias */
      65536L,              /* layer2.3.conv1.weight 128x512x1x1 */
        128L,     128L,    /* layer2.3.bn1.weight, .bias */
     147456L,              /* layer2.3.conv2.weight 128x128x3x3 */
        128L,     128L,    /* layer2.3.bn2.weight, .bias */
      65536L,              /* layer2.3.conv3.weight 512x128x1x1 */
        512L,     512L,    /* layer2.3.bn3.weight, .bias */
     131072L,              /* layer3.0.conv1.weight 256x512x1x1 */
        256L,     256L,    /* layer3.0.bn1.weight, .bias */
     589824L,              /* layer3.0.conv2.weight 256x256x3x3 */
        256L,     256L,    /* layer3.0.bn2.weight, .bias */
     262144L,              /* layer3.0.conv3.weight 1024x256x1x1 */
       1024L,    1024L,    /* layer3.0.bn3.weight, .bias */
     524288L,              /* layer3.0.downsample.0.weight 1024x512x1x1 */
       1024L,    1024L,    /* layer3.0.downsample.1.weight, .bias */
     262144L,              /* layer3.1.conv1.weight 256x1024x1x1 */
        256L,     256L,    /* layer3.1.bn1.weight, .bias */
     589824L,              /* layer3.1.conv2.weight 256x256x3x3 */
        256L,     256L,    /* layer3.1.bn2.weight, .bias */
     262144L,              /* layer3.1.conv3.weight 1024x256x1x1 */
       1024L,    1024L,    /* layer3.1.bn3.weight, .bias */
     262144L,              /* layer3.2.conv1.weight 256x1024x1x1 */
        256L,     256L,    /* layer3.2.bn1.weight, .bias */
     589824L,              /* layer3.2.conv2.weight 256x256x3x3 */
        256L,     256L,    /* layer3.2.bn2.weight, .bias */
     262144L,              /* layer3.2.conv3.weight 1024x256x1x1 */
       1024L,    1024L,    /* layer3.2.bn3.weight, .bias */
     262144L,              /* layer3.3.conv1.weight 256x1024x1x1 */
        256L,     256L,    /* layer3.3.bn1.weight, .bias */
     589824L,              /* layer3.3.conv2.weight 256x256x3x3 */
        256L,     256L,    /* layer3.3.bn2.weight, .bias */
     262144L,              /* layer3.3.conv3.weight 1024x256x1x1 */
       1024L,    1024L,    /* layer3.3.bn3.weight, .bias */
     262144L,              /* layer3.4.conv1.weight 256x1024x1x1 */
        256L,     256L,    /* layer3.4.bn1.weight, .bias */
     589824L,              /* layer3.4.conv2.weight 256x256x3x3 */
        256L,     256L,    /* layer3.4.bn2.weight, .bias */
     262144L,              /* layer3.4.conv3.weight 1024x256x1x1 */
       1024L,    1024L,    /* layer3.4.bn3.weight, .bias */
     262144L,              /* layer3.5.conv1.weight 256x1024x1x1 */
        256L,     256L,    /* layer3.5.bn1.weight, .bias */
     589824L,              /* layer3.5.conv2.weight 256x256x3x3 */
        256L,     256L,    /* layer3.5.bn2.weight, .bias */
     262144L,              /* layer3.5.conv3.weight 1024x256x1x1 */
       1024L,    1024L,    /* layer3.5.bn3.weight, .bias */
     524288L,              /* layer4.0.conv1.weight 512x1024x1x1 */
        512L,     512L,    /* layer4.0.bn1.weight, .bias */
    2359296L,              /* layer4.0.conv2.weight 512x512x3x3 */
        512L,     512L,    /* layer4.0.bn2.weight, .bias */
    1048576L,              /* layer4.0.conv3.weight 2048x512x1x1 */
       2048L,    2048L,    /* layer4.0.bn3.weight, .bias */
    2097152L,              /* layer4.0.downsample.0.weight 2048x1024x1x1 */
       2048L,    2048L,    /* layer4.0.downsample.1.weight, .bias */
    1048576L,              /* layer4.1.conv1.weight 512x2048x1x1 */
        512L,     512L,    /* layer4.1.bn1.weight, .bias */
    2359296L,              /* layer4.1.conv2.weight 512x512x3x3 */
        512L,     512L,    /* layer4.1.bn2.weight, .bias */
    1048576L,              /* layer4.1.conv3.weight 2048x512x1x1 */
       2048L,    2048L,    /* layer4.1.bn3.weight, .bias */
    1048576L,              /* layer4.2.conv1.weight 512x2048x1x1 */
        512L,     512L,    /* layer4.2.bn1.weight, .bias */
    2359296L,              /* layer4.2.conv2.weight 512x512x3x3 */
        512L,     512L,    /* layer4.2.bn2.weight, .bias */
    1048576L,              /* layer4.2.conv3.weight 2048x512x1x1 */
       2048L,    2048L,    /* layer4.2.bn3.weight, .bias */
    2048000L,    1000L,    /* fc.weight 1000x2048, fc.bias */
};

#endif /* KVS_BENCH_RESNET50_SIZES_H */
